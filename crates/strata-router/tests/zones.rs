//! The router over real engine replicas arranged in zones: quorum writes in
//! the local zone, proxy gets to other zones, 404 only when every replica
//! answered so, and put acks from replicas that replication reached first.

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use strata_engine::{BlobRecord, EngineConfig, Replica, Store, WriteAck, WriteOp};
use strata_router::{ClusterView, Policy, PutOptions, ReplicaError, ReplicaHandle, Router, RouterConfig, RouterError};
use strata_types::{Key, PartitionId, SystemClock};

/// How a replica behaves.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Healthy,
    /// Its node does not answer.
    Down,
    /// Replication copies every put here just before the router's write.
    Raced,
    /// Another blob already holds the id here.
    Collides,
    /// Its node accepts the request and never answers (paused).
    Paused,
    /// Its node answers writes 300 ms late.
    Slow,
}

struct Handle(Arc<Replica>, Mode);

impl ReplicaHandle for Handle {
    fn write(&self, op: WriteOp) -> BoxFuture<'static, Result<WriteAck, ReplicaError>> {
        let (r, mode) = (self.0.clone(), self.1);
        async move {
            match (mode, &op) {
                (Mode::Down, _) => return Err(ReplicaError::Unreachable("node down".into())),
                (Mode::Slow, _) => tokio::time::sleep(std::time::Duration::from_millis(300)).await,
                (Mode::Raced, WriteOp::Put { key, props, data }) => {
                    r.submit(WriteOp::ReplicaPut { key: key.clone(), props: props.clone(), data: data.clone(), created_ms: 1 }).await?;
                }
                (Mode::Collides, WriteOp::Put { key, props, .. }) => {
                    r.submit(WriteOp::ReplicaPut { key: key.clone(), props: props.clone(), data: Bytes::from_static(b"other"), created_ms: 1 }).await?;
                }
                _ => {}
            }
            Ok(r.submit(op).await?)
        }
        .boxed()
    }
    fn read(&self, key: Key, with_data: bool) -> BoxFuture<'static, Result<BlobRecord, ReplicaError>> {
        if self.1 == Mode::Down {
            return futures_util::future::ready(Err(ReplicaError::Unreachable("node down".into()))).boxed();
        }
        if self.1 == Mode::Paused {
            return futures_util::future::pending().boxed();
        }
        let r = if with_data { self.0.get(&key) } else { self.0.info(&key) };
        futures_util::future::ready(r.map_err(ReplicaError::from)).boxed()
    }
    fn keys_page(&self, after: Option<Key>, max: usize) -> BoxFuture<'static, Result<Vec<Key>, ReplicaError>> {
        if self.1 == Mode::Down {
            return futures_util::future::ready(Err(ReplicaError::Unreachable("node down".into()))).boxed();
        }
        let keys = self.0.keys_after(after.as_ref(), max).into_iter().map(|(k, _)| k).collect();
        futures_util::future::ready(Ok(keys)).boxed()
    }
}

struct Zones {
    local: Vec<(Arc<Replica>, Mode)>,
    remote: Vec<(Arc<Replica>, Mode)>,
}

impl ClusterView for Zones {
    fn writable_partitions(&self) -> Vec<PartitionId> {
        vec![1]
    }
    fn all_partitions(&self) -> Vec<PartitionId> {
        vec![1]
    }
    fn replicas(&self, p: PartitionId) -> Vec<Arc<dyn ReplicaHandle>> {
        if p != 1 {
            return Vec::new();
        }
        self.local.iter().map(|(r, m)| Arc::new(Handle(r.clone(), *m)) as Arc<dyn ReplicaHandle>).collect()
    }
    fn remote_replicas(&self, p: PartitionId) -> Vec<Arc<dyn ReplicaHandle>> {
        if p != 1 {
            return Vec::new();
        }
        self.remote.iter().map(|(r, m)| Arc::new(Handle(r.clone(), *m)) as Arc<dyn ReplicaHandle>).collect()
    }
}

fn replicas(dir: &std::path::Path, n: usize) -> Vec<Arc<Replica>> {
    (0..n)
        .map(|i| {
            let store =
                Store::open(&dir.join(format!("s{i}")), EngineConfig { disk_reserve_bytes: 0, ..EngineConfig::default() }, Arc::new(SystemClock)).unwrap();
            store.create_replica(1).unwrap()
        })
        .collect()
}

fn router(local: Vec<(Arc<Replica>, Mode)>, remote: Vec<(Arc<Replica>, Mode)>) -> Arc<Router> {
    // A new seed per router, so each draws different ids.
    static SEED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let seed = SEED.fetch_add(1, Ordering::Relaxed);
    Arc::new(Router::new(Arc::new(Zones { local, remote }), RouterConfig::default(), Arc::new(SystemClock), Some(seed)))
}

fn whole(b: strata_router::BlobBody) -> Bytes {
    match b.data {
        strata_router::BlobData::Whole(bytes, _) => bytes,
        strata_router::BlobData::Stream(_) => panic!("small blobs are simple"),
    }
}

async fn put(r: &Arc<Router>, data: &'static [u8], policy: Option<Policy>) -> Result<strata_types::BlobId, RouterError> {
    r.put_bytes(PutOptions { policy, ..PutOptions::default() }, Bytes::from_static(data)).await
}

#[tokio::test]
async fn a_slow_replica_still_gets_the_write_after_the_put_is_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let rs = replicas(dir.path(), 3);
    let r = router(vec![(rs[0].clone(), Mode::Healthy), (rs[1].clone(), Mode::Healthy), (rs[2].clone(), Mode::Slow)], vec![]);
    let t = std::time::Instant::now();
    let id = put(&r, b"two acks, three copies", None).await.expect("2 acks of 3 is the default");
    assert!(t.elapsed() < std::time::Duration::from_millis(300), "the put waited for the slow replica");
    // Not cancelled at the acknowledgement: the slow replica's write lands.
    let key = id.key();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while rs[2].info(&key).is_err() {
        assert!(std::time::Instant::now() < deadline, "the slow replica never got the blob");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(r.stats().late_writes_done.load(Ordering::Relaxed), 1);
    assert_eq!(r.stats().late_write_bytes.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn quorum_in_the_local_zone() {
    let dir = tempfile::tempdir().unwrap();
    let rs = replicas(dir.path(), 3);
    let r = router(vec![(rs[0].clone(), Mode::Healthy), (rs[1].clone(), Mode::Healthy), (rs[2].clone(), Mode::Down)], vec![]);
    let id = put(&r, b"two of three", None).await.expect("2 acks of 3 is the default");
    assert_eq!(&r.get(id, None).await.map(whole).unwrap()[..], b"two of three");
    let all = put(&r, b"needs three", Some(Policy::All)).await;
    assert!(matches!(all, Err(RouterError::Unavailable(_))), "{all:?}");
}

#[tokio::test]
async fn gets_proxy_to_other_zones_and_404_only_when_everyone_said_so() {
    let dir = tempfile::tempdir().unwrap();
    let rs = replicas(dir.path(), 3);
    // Written in the remote zone only (replication has not copied it yet).
    let writer = router(vec![(rs[2].clone(), Mode::Healthy)], vec![]);
    let id = put(&writer, b"written elsewhere", None).await.unwrap();

    let reader = router(vec![(rs[0].clone(), Mode::Healthy), (rs[1].clone(), Mode::Healthy)], vec![(rs[2].clone(), Mode::Healthy)]);
    assert_eq!(&reader.get(id, None).await.map(whole).unwrap()[..], b"written elsewhere");
    assert_eq!(reader.stats().proxied_gets.load(Ordering::Relaxed), 1);

    // The remote zone unreachable: unknown, not "not found".
    let cut = router(vec![(rs[0].clone(), Mode::Healthy), (rs[1].clone(), Mode::Healthy)], vec![(rs[2].clone(), Mode::Down)]);
    assert!(matches!(cut.get(id, None).await.map(|_| ()), Err(RouterError::Unavailable(_))));
    // Every replica answered "not found": 404.
    let other = put(&router(vec![(rs[0].clone(), Mode::Healthy)], vec![]), b"x", None).await.unwrap();
    let missing = router(vec![(rs[1].clone(), Mode::Healthy)], vec![(rs[2].clone(), Mode::Healthy)]);
    let r = missing.get(other, None).await.map(|_| ());
    assert!(matches!(r, Err(RouterError::NotFound)), "{r:?}");
}

#[tokio::test]
async fn replication_racing_a_put_is_an_ack_but_a_different_blob_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let rs = replicas(dir.path(), 3);
    let r = router(vec![(rs[0].clone(), Mode::Raced), (rs[1].clone(), Mode::Raced), (rs[2].clone(), Mode::Down)], vec![]);
    let id = put(&r, b"raced", None).await.expect("raced replicas hold this very blob");
    assert_eq!(r.stats().put_replication_races.load(Ordering::Relaxed), 2);
    assert_eq!(&rs[0].get(&id.key()).unwrap().data[..], b"raced");

    let c = router(vec![(rs[0].clone(), Mode::Collides), (rs[1].clone(), Mode::Collides), (rs[2].clone(), Mode::Down)], vec![]);
    let e = put(&c, b"mine", None).await;
    assert!(e.is_err(), "a different blob under the id is a collision, not an ack: {e:?}");
    assert_eq!(c.stats().put_replication_races.load(Ordering::Relaxed), 0);
}

/// A paused node (accepts, never answers) does not hold a get up: after a
/// short wait the router asks the next replica too. Without hedging this
/// get would wait forever; the 30 s bound only turns a hang into a failure.
#[tokio::test]
async fn a_paused_replica_does_not_hold_up_gets() {
    let dir = tempfile::tempdir().unwrap();
    let rs = replicas(dir.path(), 2);
    let writer = router(vec![(rs[0].clone(), Mode::Healthy), (rs[1].clone(), Mode::Healthy)], vec![]);
    let id = put(&writer, b"both have it", Some(Policy::All)).await.unwrap();
    for _ in 0..8 {
        // Random order: some gets ask the paused replica first.
        let r = router(vec![(rs[0].clone(), Mode::Paused), (rs[1].clone(), Mode::Healthy)], vec![]);
        let got = tokio::time::timeout(std::time::Duration::from_secs(30), r.get(id, None)).await.expect("the get hung on the paused replica");
        assert_eq!(&got.map(whole).unwrap()[..], b"both have it");
    }
}

/// Write policies other than `local:N` count every zone's replicas and wait
/// for remote zones (README's cluster has one replica per zone: `all` used
/// to mean that one). A policy that cannot be met names the acks it got.
#[tokio::test]
async fn write_policies_count_every_zone() {
    let dir = tempfile::tempdir().unwrap();
    let rs = replicas(dir.path(), 3);
    let r = router(vec![(rs[0].clone(), Mode::Healthy)], vec![(rs[1].clone(), Mode::Healthy), (rs[2].clone(), Mode::Down)]);
    let all = put(&r, b"needs three", Some(Policy::All)).await;
    match all {
        Err(RouterError::Unavailable(e @ strata_router::Unavailable::QuorumNotMet { acks: 2, needed: 3, .. })) => {
            assert!(e.to_string().contains("2 of 3 acks"), "{e}")
        }
        other => panic!("all with a zone down: {other:?}"),
    }
    let too_many = put(&r, b"needs four", Some(Policy::Count(4))).await;
    match too_many {
        Err(RouterError::Unavailable(e @ strata_router::Unavailable::PolicyExceedsReplicas { needed: 4, replicas: 3, .. })) => {
            assert!(e.to_string().contains("needs 4 acks") && e.to_string().contains("has 3 replicas"), "{e}")
        }
        other => panic!("a count above the replicas: {other:?}"),
    }
    let two = put(&r, b"two zones", Some(Policy::Count(2))).await.expect("the local zone and one remote zone ack");
    for replica in &rs[..2] {
        assert_eq!(&replica.get(&two.key()).unwrap().data[..], b"two zones", "a counted policy writes to remote zones synchronously");
    }
    let local = put(&r, b"local zone", None).await.expect("Ambry's default: the local zone's replicas (here one)");
    assert!(rs[0].get(&local.key()).is_ok());
    assert!(rs[1].get(&local.key()).is_err(), "a local policy leaves other zones to replication");
}

fn flip_data(replica: &Replica, key: &Key) {
    use std::os::unix::fs::FileExt;
    let at = replica.get(key).unwrap().file_range.unwrap().offset + 3;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(replica.dir().join("seg-00000000-g0000.log")).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0xff], at).unwrap();
}

/// A get that meets a damaged copy serves a whole one from another replica
/// and writes it over the damaged one (read repair); with every copy
/// damaged, the answer is an integrity error, not "not found".
#[tokio::test]
async fn gets_repair_damaged_copies_and_never_call_them_missing() {
    let dir = tempfile::tempdir().unwrap();
    let rs = replicas(dir.path(), 2);
    let r = router(vec![(rs[0].clone(), Mode::Healthy), (rs[1].clone(), Mode::Healthy)], vec![]);
    let id = put(&r, b"kept whole somewhere", Some(Policy::All)).await.unwrap();
    flip_data(&rs[0], &id.key());
    for _ in 0..4 {
        // Whichever replica is asked first, the whole copy is served.
        assert_eq!(&r.get(id, None).await.map(whole).unwrap()[..], b"kept whole somewhere");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while r.stats().read_repairs.load(Ordering::Relaxed) == 0 {
        assert!(std::time::Instant::now() < deadline, "no read repair happened");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(&rs[0].get(&id.key()).unwrap().data[..], b"kept whole somewhere", "the damaged copy was repaired");
    assert!(rs[0].damage().is_empty());

    let both = put(&r, b"damaged everywhere", Some(Policy::All)).await.unwrap();
    flip_data(&rs[0], &both.key());
    flip_data(&rs[1], &both.key());
    let e = r.get(both, None).await.map(|_| ());
    assert!(matches!(e, Err(RouterError::Corrupt(_))), "{e:?}");
    let e = r.info(both).await.map(|_| ());
    assert!(matches!(e, Err(RouterError::Corrupt(_))), "{e:?}");
}

/// A node whose copy of the map lags: it does not hold partition 1 until it
/// catches up with the cluster (as a follower that has not applied the
/// entry creating it yet).
struct Lagging {
    zones: Zones,
    caught_up: std::sync::atomic::AtomicBool,
    catch_ups: std::sync::atomic::AtomicUsize,
}

impl ClusterView for Lagging {
    fn writable_partitions(&self) -> Vec<PartitionId> {
        if self.caught_up.load(Ordering::SeqCst) { self.zones.writable_partitions() } else { Vec::new() }
    }
    fn all_partitions(&self) -> Vec<PartitionId> {
        if self.caught_up.load(Ordering::SeqCst) { self.zones.all_partitions() } else { Vec::new() }
    }
    fn replicas(&self, p: PartitionId) -> Vec<Arc<dyn ReplicaHandle>> {
        if self.caught_up.load(Ordering::SeqCst) { self.zones.replicas(p) } else { Vec::new() }
    }
    fn remote_replicas(&self, p: PartitionId) -> Vec<Arc<dyn ReplicaHandle>> {
        if self.caught_up.load(Ordering::SeqCst) { self.zones.remote_replicas(p) } else { Vec::new() }
    }
    fn catch_up(&self) -> BoxFuture<'_, ()> {
        self.catch_ups.fetch_add(1, Ordering::SeqCst);
        self.caught_up.store(true, Ordering::SeqCst);
        Box::pin(async {})
    }
}

#[tokio::test]
async fn a_node_whose_map_lags_catches_up_before_calling_a_partition_missing() {
    let dir = tempfile::tempdir().unwrap();
    let rs = replicas(dir.path(), 3);
    let writer = router(rs.iter().map(|r| (r.clone(), Mode::Healthy)).collect(), vec![]);
    let id = put(&writer, b"put to a partition created a moment ago", None).await.unwrap();
    let lagging = |rs: &[Arc<Replica>]| {
        let view = Lagging {
            zones: Zones { local: rs.iter().map(|r| (r.clone(), Mode::Healthy)).collect(), remote: vec![] },
            caught_up: false.into(),
            catch_ups: 0.into(),
        };
        let view = Arc::new(view);
        (view.clone(), Arc::new(Router::new(view, RouterConfig::default(), Arc::new(SystemClock), Some(7))))
    };
    // A get: the blob, not "partition 1 does not exist".
    let (view, reader) = lagging(&rs);
    assert_eq!(&reader.get(id, None).await.map(whole).unwrap()[..], b"put to a partition created a moment ago");
    assert_eq!(view.catch_ups.load(Ordering::SeqCst), 1);
    // A delete too (on every replica before it returns, so the get below
    // cannot meet a copy whose delete is still finishing).
    let (view, deleter) = lagging(&rs);
    deleter.delete_with(id, Some(Policy::All), None).await.unwrap();
    assert_eq!(view.catch_ups.load(Ordering::SeqCst), 1);
    assert!(matches!(writer.get(id, None).await.map(|_| ()), Err(RouterError::Deleted | RouterError::NotFound)));
    // A partition that does not exist even after catching up: 404, once.
    let (view, reader) = lagging(&rs);
    let nowhere = strata_types::BlobId::new(strata_types::BlobKind::Simple, 9, &mut rand::rng());
    let r = reader.get(nowhere, None).await.map(|_| ());
    assert!(matches!(r, Err(RouterError::NoSuchPartition(9))), "{r:?}");
    assert_eq!(view.catch_ups.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_partition_whose_replicas_all_are_out_of_service_is_unavailable_not_missing() {
    /// The map holds partition 1, but every replica sits on a down node.
    struct AllDown;
    impl ClusterView for AllDown {
        fn writable_partitions(&self) -> Vec<PartitionId> {
            vec![]
        }
        fn all_partitions(&self) -> Vec<PartitionId> {
            vec![1]
        }
        fn replicas(&self, _: PartitionId) -> Vec<Arc<dyn ReplicaHandle>> {
            Vec::new()
        }
        fn has_partition(&self, p: PartitionId) -> bool {
            p == 1
        }
        fn replica_count(&self, p: PartitionId) -> usize {
            if p == 1 { 3 } else { 0 }
        }
    }
    let r = Arc::new(Router::new(Arc::new(AllDown), RouterConfig::default(), Arc::new(SystemClock), Some(1)));
    let id = strata_types::BlobId::new(strata_types::BlobKind::Simple, 1, &mut rand::rng());
    let got = r.get(id, None).await.map(|_| ());
    assert!(matches!(got, Err(RouterError::Unavailable(_))), "{got:?}");
}

/// Two partitions; this node holds a replica of partition 2 only.
struct OneLocal {
    one: Vec<Arc<Replica>>,
    two: Vec<(Arc<Replica>, Mode)>,
}

impl ClusterView for OneLocal {
    fn writable_partitions(&self) -> Vec<PartitionId> {
        vec![1, 2]
    }
    fn all_partitions(&self) -> Vec<PartitionId> {
        vec![1, 2]
    }
    fn replicas(&self, p: PartitionId) -> Vec<Arc<dyn ReplicaHandle>> {
        match p {
            1 => self.one.iter().map(|r| Arc::new(Handle(r.clone(), Mode::Healthy)) as Arc<dyn ReplicaHandle>).collect(),
            2 => self.two.iter().map(|(r, m)| Arc::new(Handle(r.clone(), *m)) as Arc<dyn ReplicaHandle>).collect(),
            _ => Vec::new(),
        }
    }
    fn holds_locally(&self, p: PartitionId) -> bool {
        p == 2
    }
}

#[tokio::test]
async fn a_datanode_puts_to_partitions_it_holds_and_elsewhere_when_they_fail() {
    let dir = tempfile::tempdir().unwrap();
    let store = |i: usize| {
        Store::open(&dir.path().join(format!("n{i}")), EngineConfig { disk_reserve_bytes: 0, ..EngineConfig::default() }, Arc::new(SystemClock)).unwrap()
    };
    let stores: Vec<Store> = (0..3).map(store).collect();
    let one: Vec<Arc<Replica>> = stores.iter().map(|s| s.create_replica(1).unwrap()).collect();
    let two: Vec<Arc<Replica>> = stores.iter().map(|s| s.create_replica(2).unwrap()).collect();
    let view = |mode: Mode| OneLocal { one: one.clone(), two: two.iter().map(|r| (r.clone(), mode)).collect() };
    let r = Arc::new(Router::new(Arc::new(view(Mode::Healthy)), RouterConfig::default(), Arc::new(SystemClock), Some(3)));
    for _ in 0..20 {
        assert_eq!(put(&r, b"local", None).await.unwrap().partition(), 2, "a put went past the partition this node holds");
    }
    // The local partition's replicas down: the puts go to the other one.
    let r = Arc::new(Router::new(Arc::new(view(Mode::Down)), RouterConfig::default(), Arc::new(SystemClock), Some(4)));
    for _ in 0..5 {
        assert_eq!(put(&r, b"elsewhere", None).await.unwrap().partition(), 1);
    }
}

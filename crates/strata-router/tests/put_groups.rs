//! Concurrent puts share a partition (so its group commit gathers them);
//! puts made one after another still spread over every partition.

use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use strata_engine::{EngineConfig, Store};
use strata_router::{LocalView, PutOptions, Router, RouterConfig};
use strata_types::SystemClock;

const PARTITIONS: u64 = 8;

fn router(dir: &std::path::Path) -> (Arc<Router>, Arc<Store>) {
    let clock = Arc::new(SystemClock);
    let store = Arc::new(Store::open(dir, EngineConfig::default(), clock.clone()).unwrap());
    for p in 0..PARTITIONS {
        store.create_replica(p).unwrap();
    }
    (Arc::new(Router::new(Arc::new(LocalView::new(store.clone())), RouterConfig::default(), clock, Some(7))), store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_puts_join_one_partition_and_sequential_ones_spread() {
    let dir = tempfile::tempdir().unwrap();
    let (router, _store) = router(dir.path());
    let data = Bytes::from(vec![7u8; 4096]);

    // One after another: each put starts alone and draws at random.
    let mut per_partition: BTreeMap<u64, usize> = BTreeMap::new();
    for _ in 0..160 {
        let id = router.put_bytes(PutOptions::default(), data.clone()).await.unwrap();
        *per_partition.entry(id.partition()).or_default() += 1;
    }
    assert_eq!(per_partition.len(), PARTITIONS as usize, "sequential puts used only {per_partition:?}");
    assert!(per_partition.values().all(|n| *n <= 50), "sequential puts piled onto one partition: {per_partition:?}");

    // Bursts of 16 at once: each burst joins the group its first put drew,
    // where a draw per put would touch about 7 of the 8 partitions.
    let mut touched = 0;
    let mut used = BTreeSet::new();
    for _ in 0..12 {
        let burst: Vec<_> = (0..16).map(|_| router.put_bytes(PutOptions::default(), data.clone())).collect();
        let ids = futures_util::future::join_all(burst).await;
        let parts: BTreeSet<u64> = ids.into_iter().map(|r| r.unwrap().partition()).collect();
        touched += parts.len();
        used.extend(parts);
    }
    assert!(touched <= 24, "12 bursts of 16 concurrent puts touched {touched} partitions in all");
    assert!(used.len() >= 4, "the bursts kept to partitions {used:?}: groups must still be drawn at random");
}

/// A group takes a bounded number of puts, so a load that never pauses
/// still moves over the partitions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbroken_load_still_moves_between_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let (router, _store) = router(dir.path());
    let data = Bytes::from(vec![9u8; 4096]);
    let burst: Vec<_> = (0..256).map(|_| router.put_bytes(PutOptions::default(), data.clone())).collect();
    let parts: BTreeSet<u64> = futures_util::future::join_all(burst).await.into_iter().map(|r| r.unwrap().partition()).collect();
    assert!(parts.len() >= 3, "256 puts in flight together all went to {parts:?}");
}

/// Large puts fill an fsync alone: they keep drawing partitions at random,
/// so concurrent ones are written in parallel by several writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_concurrent_puts_do_not_share_a_partition() {
    let dir = tempfile::tempdir().unwrap();
    let (router, _store) = router(dir.path());
    let data = Bytes::from(vec![3u8; 1 << 20]);
    let mut touched = 0;
    for _ in 0..4 {
        let burst: Vec<_> = (0..8).map(|_| router.put_bytes(PutOptions::default(), data.clone())).collect();
        let parts: BTreeSet<u64> = futures_util::future::join_all(burst).await.into_iter().map(|r| r.unwrap().partition()).collect();
        touched += parts.len();
    }
    assert!(touched >= 12, "4 bursts of 8 concurrent 1 MiB puts touched {touched} partitions in all");
}

//! The upload buffer bounds the memory that concurrent streamed puts hold,
//! without deadlocking them: many puts bigger than the whole buffer all
//! finish, intact, and the bytes held never pass the limit.

use bytes::Bytes;
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use strata_engine::{EngineConfig, Store};
use strata_router::{BlobData, LocalView, PutOptions, Router, RouterConfig};
use strata_types::SystemClock;

const MIB: usize = 1 << 20;

/// A router over a one-node store with `partitions` replicas in `dir`.
fn router_over(dir: &std::path::Path, partitions: strata_types::PartitionId, config: RouterConfig) -> Arc<Router> {
    let clock = Arc::new(SystemClock);
    let store = Arc::new(Store::open(dir, EngineConfig::default(), clock.clone()).unwrap());
    for p in 0..partitions {
        store.create_replica(p).unwrap();
    }
    Arc::new(Router::new(Arc::new(LocalView::new(store)), config, clock, Some(7)))
}

/// A blob's bytes, whole.
async fn read_back(router: &Arc<Router>, id: strata_types::BlobId) -> Vec<u8> {
    match router.get(id, None).await.unwrap().data {
        BlobData::Whole(b, _) => b.to_vec(),
        BlobData::Stream(s) => s.map(|c| c.unwrap()).collect::<Vec<_>>().await.concat(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_puts_stay_within_the_upload_buffer_and_all_finish() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 3 * MIB as u64;
    let router = router_over(dir.path(), 4, RouterConfig { chunk_size: MIB, upload_buffer_bytes: limit, ..RouterConfig::default() });

    // Watch the bytes held while the puts run.
    let (peak, done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let watcher = {
        let (router, peak, done) = (router.clone(), peak.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(router.upload_buffer_held(), Ordering::SeqCst);
                tokio::task::yield_now().await;
            }
        })
    };
    // Eight puts of 5.5 MiB each in 64 KiB frames: with a window of four
    // chunks in flight each would hold up to 5 MiB, 40 MiB in all.
    let puts: Vec<_> = (0..8u8)
        .map(|n| {
            let router = router.clone();
            tokio::spawn(async move {
                let data: Vec<u8> = (0..5 * MIB + MIB / 2).map(|i| (i as u8).wrapping_mul(31).wrapping_add(n)).collect();
                let frames: Vec<Result<Bytes, std::io::Error>> = data.chunks(64 << 10).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
                let id = router.put_stream(PutOptions::default(), futures_util::stream::iter(frames)).await.unwrap();
                (id, data)
            })
        })
        .collect();
    let mut written = Vec::new();
    for p in puts {
        written.push(tokio::time::timeout(std::time::Duration::from_secs(60), p).await.expect("the puts deadlocked").unwrap());
    }
    done.store(true, Ordering::SeqCst);
    watcher.await.unwrap();

    let peak = peak.load(Ordering::SeqCst);
    assert!(peak > 0 && peak <= limit, "held {peak} bytes against a buffer of {limit}");
    assert!(router.stats().upload_buffer_waits.load(Ordering::Relaxed) > 0, "the buffer never bound: the test proves nothing");
    assert_eq!(router.upload_buffer_held(), 0, "finished puts still hold room");
    for (id, data) in written {
        assert!(read_back(&router, id).await == data, "blob {id} read back different bytes");
    }
}

/// A body's announced size only sizes the first buffer: bodies shorter or
/// longer than announced (by a byte, or by chunks) are stored whole, and
/// every put gives its room back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_size_hint_changes_nothing_but_the_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let router = router_over(dir.path(), 2, RouterConfig { chunk_size: MIB, upload_buffer_bytes: 4 * MIB as u64, ..RouterConfig::default() });
    let cases: [(usize, Option<u64>); 8] = [
        (1000, Some(1000)),
        (1000, Some(999)),
        (1000, Some(1)),
        (1000, Some(0)),
        (1000, Some(5 * MIB as u64)),
        (MIB + 1, Some(MIB as u64)),
        (3 * MIB + 17, Some(100)),
        (2 * MIB, Some(u64::MAX)),
    ];
    for (n, (len, hint)) in cases.into_iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(n as u8)).collect();
        let frames: Vec<Result<Bytes, std::io::Error>> = data.chunks(100_000).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        let opts = PutOptions { size_hint: hint, ..PutOptions::default() };
        let id = router.put_stream(opts, futures_util::stream::iter(frames)).await.unwrap();
        assert_eq!(router.upload_buffer_held(), 0, "a put of {len} bytes announced as {hint:?} still holds room");
        let got = read_back(&router, id).await;
        assert!(got == data, "{len} bytes announced as {hint:?} read back as {} different bytes", got.len());
    }
}

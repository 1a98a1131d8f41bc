//! Engine behaviours beyond the model test: capacity-driven read-only state,
//! compaction running while the replica serves reads and writes, and cold
//! records read past the page cache.

use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use strata_engine::{EngineConfig, EngineError, ReadOnlyReason, Store, WriteOp};
use strata_format::PutProps;
use strata_types::{Key, KeyKind, SystemClock};

fn key(i: u32) -> Key {
    Key::new(KeyKind::Blob, &i.to_le_bytes()).unwrap()
}

fn put(i: u32, len: usize) -> WriteOp {
    WriteOp::Put { key: key(i), props: PutProps::default(), data: Bytes::from(vec![(i % 251) as u8; len]) }
}

#[test]
fn read_only_past_capacity_fraction_but_deletes_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig { replica_capacity_bytes: 100_000, disk_reserve_bytes: 0, ..EngineConfig::default() };
    let store = Store::open(dir.path(), config, Arc::new(SystemClock)).unwrap();
    let r = store.create_replica(1).unwrap();
    let mut stored = 0;
    let refused = loop {
        match r.submit(put(stored, 10_000)).wait() {
            Ok(_) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 20, "capacity never enforced");
    };
    assert!(matches!(refused, EngineError::ReadOnly { reason: ReadOnlyReason::Capacity, .. }), "{refused:?}");
    // 85% of 100 kB: the eighth or ninth 10 kB put crosses it.
    assert!((8..=9).contains(&stored), "{stored} puts fit");
    assert!(!r.is_writable());
    r.submit(WriteOp::Delete { key: key(0) }).wait().expect("deletes go through on a read-only replica");
    assert_eq!(&r.get(&key(1)).unwrap().data[..], &vec![1u8; 10_000][..]);
}

/// Whether files in `dir` can be opened with `O_DIRECT` (tmpfs cannot):
/// where not, the engine uses the page cache and the direct paths are not
/// checked.
fn has_direct(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join("probe");
    std::fs::write(&probe, b"x").unwrap();
    std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(&probe).is_ok()
}

/// Blobs that fell out of the write window are read with O_DIRECT (where
/// the filesystem has it) and come back whole; recent ones are read from
/// the page cache; a pool too small for a record falls back to the page
/// cache and still answers.
#[test]
fn cold_large_records_are_read_directly_and_whole() {
    let dir = tempfile::tempdir().unwrap();
    let has_direct = has_direct(dir.path());
    // Writes through the page cache (no tail cache), so its window applies.
    let config = EngineConfig { write_cache_bytes: 4 << 20, cold_read_buffer_bytes: 4 << 20, tail_cache_bytes: 0, ..EngineConfig::default() };
    let store = Store::open(dir.path(), config, Arc::new(SystemClock)).unwrap();
    let r = store.create_replica(1).unwrap();
    let body = |i: u32| Bytes::from((0..(1_500_000 + i)).map(|b| (b.wrapping_mul(31) ^ i) as u8).collect::<Vec<_>>());
    for i in 0..8 {
        r.submit(WriteOp::Put { key: key(i), props: PutProps::default(), data: body(i) }).wait().unwrap();
    }
    let direct = || r.stats().direct_reads.load(Ordering::Relaxed);
    // The newest blob is still in the window: no direct read.
    assert_eq!(r.get(&key(7)).unwrap().data, body(7));
    assert_eq!(direct(), 0);
    // The oldest were dropped from the page cache behind the window.
    let held: Vec<_> = (0..2).map(|i| r.get(&key(i)).unwrap()).collect();
    for (i, rec) in held.iter().enumerate() {
        assert_eq!(rec.data, body(i as u32), "blob {i}");
    }
    if has_direct {
        assert_eq!(direct(), 2, "cold blobs read with O_DIRECT");
        assert!(held.iter().all(|h| h.file_range.is_none()), "no sendfile from a private buffer");
        // Both 2 MiB buffers are lent out: a third cold read uses the page cache.
        assert_eq!(r.get(&key(2)).unwrap().data, body(2));
        assert_eq!(direct(), 2);
        drop(held);
        assert_eq!(r.get(&key(3)).unwrap().data, body(3));
        assert_eq!(direct(), 3, "returned buffers are used again");
    }
}

/// Large writes go to the log with O_DIRECT from the tail cache (where the
/// filesystem has it) and the recent ones are read back from it; small
/// records between them, whose pages the direct writes share, stay intact;
/// a reader holding a record does not stop writes; and everything reads
/// back the same from disk after a restart.
#[test]
fn large_writes_go_through_the_tail_cache() {
    let dir = tempfile::tempdir().unwrap();
    let has_direct = has_direct(dir.path());
    // Two 16 MiB regions; segments small enough that the log rolls.
    let config = EngineConfig { tail_cache_bytes: 32 << 20, segment_bytes: 24 << 20, record_bytes_max: 4 << 20, ..EngineConfig::default() };
    let big = |i: u32| Bytes::from((0..(1_000_000 + 37 * i)).map(|b| (b.wrapping_mul(7) ^ i) as u8).collect::<Vec<_>>());
    let small = |i: u32| Bytes::from(vec![(i % 251) as u8; 100 + i as usize]);
    let n = 60u32;
    {
        let store = Store::open(dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
        let r = store.create_replica(1).unwrap();
        let s = r.stats();
        let mut held = None;
        for i in 0..n {
            r.submit(WriteOp::Put { key: key(2 * i), props: PutProps::default(), data: big(i) }).wait().unwrap();
            r.submit(WriteOp::Put { key: key(2 * i + 1), props: PutProps::default(), data: small(i) }).wait().unwrap();
            if i == 5 {
                // Held across the rest of the writes, which must not touch it.
                held = Some(r.get(&key(10)).unwrap());
            }
        }
        let held = held.unwrap();
        assert_eq!(held.data, big(5), "a held record is never overwritten");
        if has_direct {
            assert_eq!(s.direct_writes.load(Ordering::Relaxed), n as u64, "every large put went direct");
            assert_eq!(s.tail_cache_hits.load(Ordering::Relaxed), 1);
            // The last blob is read from memory.
            assert_eq!(r.get(&key(2 * (n - 1))).unwrap().data, big(n - 1));
            assert_eq!(s.tail_cache_hits.load(Ordering::Relaxed), 2);
            assert!(store.tail_cache_stats().unwrap().records > 0);
        }
        // Old and new, large and small: every byte as written.
        for i in 0..n {
            assert_eq!(r.get(&key(2 * i)).unwrap().data, big(i), "blob {i}");
            assert_eq!(r.get(&key(2 * i + 1)).unwrap().data, small(i), "small record {i}");
        }
        if has_direct {
            let hits = s.tail_cache_hits.load(Ordering::Relaxed);
            assert!(hits > 2 + 5 && hits < 2 + n as u64, "recent blobs from memory, old ones from disk: {hits}");
        }
        drop(held);
        store.close();
    }
    // From disk alone, through a fresh store.
    let store = Store::open(dir.path(), EngineConfig { tail_cache_bytes: 0, ..config }, Arc::new(SystemClock)).unwrap();
    let r = store.replica(1).unwrap();
    for i in 0..n {
        assert_eq!(r.get(&key(2 * i)).unwrap().data, big(i), "blob {i} after restart");
        assert_eq!(r.get(&key(2 * i + 1)).unwrap().data, small(i), "small record {i} after restart");
    }
    assert_eq!(r.stats().torn_bytes_truncated.load(Ordering::Relaxed), 0);
}

/// A cold large record (out of the tail cache and the page cache) read a
/// second time is read into the tail cache, and from memory after that;
/// the bytes are the same every time.
#[test]
fn cold_records_read_twice_are_taken_into_the_tail_cache() {
    let dir = tempfile::tempdir().unwrap();
    let has_direct = has_direct(dir.path());
    let config = EngineConfig { tail_cache_bytes: 32 << 20, record_bytes_max: 4 << 20, ..EngineConfig::default() };
    let store = Store::open(dir.path(), config, Arc::new(SystemClock)).unwrap();
    let r = store.create_replica(1).unwrap();
    let body = |i: u32| Bytes::from((0..(2_000_000 + 11 * i)).map(|b| (b.wrapping_mul(13) ^ i) as u8).collect::<Vec<_>>());
    // 48 MB through a 32 MiB ring: the first blobs are on disk only.
    for i in 0..24 {
        r.submit(WriteOp::Put { key: key(i), props: PutProps::default(), data: body(i) }).wait().unwrap();
    }
    let s = r.stats();
    let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    for (round, i) in [(0, 0), (1, 0), (2, 0), (0, 1)] {
        assert_eq!(r.get(&key(i)).unwrap().data, body(i), "blob {i}, read {}", round + 1);
        if !has_direct {
            continue;
        }
        let (direct, fills, hits) = (count(&s.direct_reads), count(&s.tail_cache_fills), count(&s.tail_cache_hits));
        match (i, round) {
            (0, 0) => assert_eq!((direct, fills, hits), (1, 0, 0), "a first miss reads past the cache"),
            (0, 1) => assert_eq!((direct, fills, hits), (2, 1, 0), "a second miss fills the cache"),
            (0, _) => assert_eq!((direct, fills, hits), (2, 1, 1), "then it is read from memory"),
            _ => assert_eq!((direct, fills, hits), (3, 1, 1), "another cold blob starts over"),
        }
    }
}

#[test]
fn compaction_runs_while_serving_reads_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig { segment_bytes: 64 << 10, record_bytes_max: 8 << 10, index_flush_entries: 16, disk_reserve_bytes: 0, ..EngineConfig::default() };
    let store = Store::open(dir.path(), config, Arc::new(SystemClock)).unwrap();
    let r = store.create_replica(1).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Compactor: as often as it can.
    let compactor = {
        let (r, stop) = (r.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut passes = 0;
            while !stop.load(Ordering::SeqCst) {
                passes += r.compact(true).unwrap().segments_compacted;
            }
            passes
        })
    };
    // Writer: puts everything, deletes every other key a little later.
    let n = 3000u32;
    for i in 0..n {
        r.submit(put(i, 700)).wait().unwrap();
        if i >= 10 && i % 2 == 0 {
            r.submit(WriteOp::Delete { key: key(i - 10) }).wait().unwrap();
        }
        // Reader: a recent key and an old one, while segments are rewritten underneath.
        for k in [i, i / 2] {
            match r.get(&key(k)) {
                Ok(b) => assert_eq!(&b.data[..], &vec![(k % 251) as u8; 700][..], "key {k}"),
                Err(EngineError::Deleted) => assert!(k % 2 == 0 && k + 10 <= i),
                Err(e) => panic!("key {k}: {e}"),
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    let passes = compactor.join().unwrap();
    assert!(passes > 0, "compaction never rewrote a segment");
    for i in 0..n {
        let deleted = i % 2 == 0 && i + 10 < n - 1;
        match r.get(&key(i)) {
            Ok(b) => assert!(!deleted && b.data.len() == 700, "key {i}"),
            Err(EngineError::Deleted) => assert!(deleted, "key {i}"),
            Err(e) => panic!("key {i}: {e}"),
        }
    }
    assert!(r.stats().bytes_reclaimed.load(Ordering::Relaxed) > 0);
}

/// Replication's writes: a copied put keeps its origin time and is taken by
/// a replica that is full by policy; a copied delete leaves a tombstone even
/// before the put arrives, so the late put cannot resurrect the blob; both
/// answer "done" (AlreadyExists, Deleted) when repeated, and survive reopen.
#[test]
fn replica_writes_are_idempotent_and_tombstones_win() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig { replica_capacity_bytes: 100_000, disk_reserve_bytes: 0, ..EngineConfig::default() };
    {
        let store = Store::open(dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
        let r = store.create_replica(1).unwrap();
        let mut i = 0;
        while r.submit(put(i, 10_000)).wait().is_ok() {
            i += 1;
        }
        let copied = WriteOp::ReplicaPut { key: key(100), props: PutProps::default(), data: Bytes::from_static(b"copied"), created_ms: 1234 };
        r.submit(copied.clone()).wait().expect("a copied put is taken by a full replica");
        assert!(matches!(r.submit(copied).wait(), Err(EngineError::AlreadyExists)));
        let rec = r.get(&key(100)).unwrap();
        assert_eq!((rec.created_ms, &rec.data[..]), (1234, &b"copied"[..]));

        r.submit(WriteOp::ReplicaDelete { key: key(200) }).wait().expect("tombstone before the put");
        assert!(matches!(r.submit(WriteOp::ReplicaDelete { key: key(200) }).wait(), Err(EngineError::Deleted)));
        let late = WriteOp::ReplicaPut { key: key(200), props: PutProps::default(), data: Bytes::from_static(b"late"), created_ms: 1 };
        assert!(matches!(r.submit(late).wait(), Err(EngineError::AlreadyExists)));
        assert!(matches!(r.get(&key(200)), Err(EngineError::Deleted)));
        store.close();
    }
    let store = Store::open(dir.path(), config, Arc::new(SystemClock)).unwrap();
    let r = store.replica(1).unwrap();
    assert_eq!(r.get(&key(100)).unwrap().created_ms, 1234);
    assert!(matches!(r.get(&key(200)), Err(EngineError::Deleted)));
}

/// A replica the map moved away is dropped whole: gone from the store, its
/// directory gone, and not back after a reopen. A drop cut short after its
/// metadata file went is finished by the next open (never taken for a
/// replica), and the other replicas are untouched.
#[test]
fn a_dropped_replica_is_gone_and_a_half_dropped_one_is_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig { disk_reserve_bytes: 0, ..EngineConfig::default() };
    let store = Store::open(dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
    for p in 1..=3 {
        let r = store.create_replica(p).unwrap();
        r.submit(put(p as u32, 1000)).wait().unwrap();
    }
    let dir1 = store.replica(1).unwrap().dir().to_owned();
    assert!(store.drop_replica(1).unwrap());
    assert!(!store.drop_replica(1).unwrap(), "nothing left to drop");
    assert!(store.replica(1).is_none() && !dir1.exists());
    // Replica 2's drop cut short: its metadata file went, its files stayed.
    let dir2 = store.replica(2).unwrap().dir().to_owned();
    store.close();
    drop(store);
    std::fs::remove_file(dir2.join("replica.meta")).unwrap();
    let store = Store::open(dir.path(), config, Arc::new(SystemClock)).unwrap();
    assert!(store.replica(1).is_none() && store.replica(2).is_none() && !dir2.exists());
    assert_eq!(&store.replica(3).unwrap().get(&key(3)).unwrap().data[..], &vec![3u8; 1000][..]);
}

/// A roll cut short before the new segment's header was written leaves a
/// newest segment with no header: empty, or (once a crash's torn batch
/// landed past it) zeros where the header should be, then garbage. No
/// record in it was ever acknowledged, so the replica opens without it,
/// with every acknowledged record, and takes writes again. Found by the
/// fault suite on a full disk (`strata fault --disk 32MiB`).
#[test]
fn a_newest_segment_whose_header_was_never_written_is_set_aside() {
    for garbage in [0usize, 700] {
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig { disk_reserve_bytes: 0, ..EngineConfig::default() };
        let store = Store::open(dir.path(), config.clone(), Arc::new(SystemClock)).unwrap();
        let r = store.create_replica(1).unwrap();
        for i in 0..5 {
            r.submit(put(i, 3000)).wait().unwrap();
        }
        let rdir = r.dir().to_owned();
        store.close();
        drop((r, store));
        let header = strata_format::headers::SEGMENT_HEADER_BYTES;
        let mut bytes = if garbage > 0 { vec![0u8; header] } else { Vec::new() };
        bytes.extend((0..garbage).map(|i| (i * 31 % 251) as u8 | 1));
        std::fs::write(rdir.join("seg-00000001-g0000.log"), &bytes).unwrap();
        let store = Store::open(dir.path(), config, Arc::new(SystemClock)).expect("the replica opens");
        let r = store.replica(1).unwrap();
        for i in 0..5 {
            assert_eq!(&r.get(&key(i)).unwrap().data[..], &vec![(i % 251) as u8; 3000][..]);
        }
        r.submit(put(9, 100)).wait().expect("and takes writes");
        assert_eq!(rdir.join("seg-00000001-g0000.log.interrupted").exists(), garbage > 0, "set aside, not parsed");
    }
}

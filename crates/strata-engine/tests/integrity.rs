//! Integrity: damage in a log never costs a valid record, a damaged record's
//! key answers "damaged" (never "not found", never wrong bytes) until a copy
//! repairs it, and lsns never repeat, whatever recovery cut.

use bytes::Bytes;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use strata_engine::{EngineConfig, EngineError, Replica, Store, WriteOp};
use strata_format::PutProps;
use strata_types::{Key, KeyKind, ManualClock};

fn config() -> EngineConfig {
    EngineConfig { disk_reserve_bytes: 0, tail_cache_bytes: 0, ..EngineConfig::default() }
}

fn key(i: u32) -> Key {
    Key::new(KeyKind::Blob, &i.to_le_bytes()).unwrap()
}

fn data(i: u32) -> Vec<u8> {
    (0..2000u32).map(|j| (i.wrapping_mul(31).wrapping_add(j) % 251) as u8).collect()
}

fn put(i: u32) -> WriteOp {
    WriteOp::Put { key: key(i), props: PutProps::default(), data: Bytes::from(data(i)) }
}

/// The offset of each record in the active segment, in order, and the segment's path.
struct Log {
    path: PathBuf,
    offsets: Vec<u64>,
    lsns: Vec<u64>,
}

/// `n` acknowledged puts then a crash (no index flush, so recovery scans them all).
fn puts_then_crash(dir: &Path, n: u32, clock: &ManualClock) -> Log {
    let store = Store::open(dir, config(), Arc::new(clock.clone())).unwrap();
    let r = store.create_replica(1).unwrap();
    let mut offsets = Vec::new();
    let mut lsns = Vec::new();
    let mut at = strata_format::headers::SEGMENT_HEADER_BYTES as u64;
    for i in 0..n {
        let op = put(i);
        offsets.push(at);
        at += op.record_len("") as u64;
        lsns.push(r.submit(op).wait().unwrap().lsn);
    }
    r.close_without_flush();
    Log { path: r.dir().join("seg-00000000-g0000.log"), offsets, lsns }
}

fn flip(path: &Path, at: u64) {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
    f.sync_all().unwrap();
}

fn reopen(dir: &Path, clock: &ManualClock) -> (Store, Arc<Replica>) {
    let store = Store::open(dir, config(), Arc::new(clock.clone())).unwrap();
    let r = store.replica(1).unwrap();
    (store, r)
}

fn assert_damaged(r: &Replica, k: &Key) {
    assert!(matches!(r.get(k), Err(EngineError::Damaged { .. })), "get: {:?}", r.get(k).map(|b| b.size));
    assert!(matches!(r.info(k), Err(EngineError::Damaged { .. })), "info (HEAD) must not succeed either");
}

/// The reproduction: one flipped byte inside the 3rd of 30 blobs'
/// data used to cut the log there, losing 28 acknowledged blobs.
#[test]
fn a_flipped_data_byte_loses_nothing_but_quarantines_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let log = puts_then_crash(dir.path(), 30, &clock);
    flip(&log.path, log.offsets[2] + 1000);
    for round in 0..2 {
        let (_store, r) = reopen(dir.path(), &clock);
        for i in (0..30).filter(|i| *i != 2) {
            assert_eq!(&r.get(&key(i)).unwrap().data[..], &data(i)[..], "blob {i}, round {round}");
        }
        assert_damaged(&r, &key(2));
        let damage = r.damage();
        assert_eq!(damage.len(), 1, "{damage:?}");
        assert_eq!((damage[0].offset, damage[0].key.clone()), (log.offsets[2], Some(key(2))));
        assert_eq!(r.stats().torn_bytes_truncated.load(Ordering::Relaxed), 0);
        assert_eq!(r.status().damaged_ranges, 1);
        // A plain put of the key is refused; the key is not free.
        assert!(matches!(r.submit(put(2)).wait(), Err(EngineError::AlreadyExists)));
        // The first open found it; the second knew it from damage.list
        // (the range is indexed by then: close flushed the memtable).
        assert_eq!(r.stats().damage_found.load(Ordering::Relaxed), if round == 0 { 1 } else { 0 });
        r.close();
    }
    // A whole copy from a peer repairs it, for good.
    let (_store, r) = reopen(dir.path(), &clock);
    r.submit(WriteOp::ReplicaPut { key: key(2), props: PutProps::default(), data: Bytes::from(data(2)), created_ms: 5 }).wait().unwrap();
    assert_eq!(&r.get(&key(2)).unwrap().data[..], &data(2)[..]);
    assert!(r.damage().is_empty());
    assert_eq!(r.stats().damage_cleared.load(Ordering::Relaxed), 1);
    r.close_without_flush();
    let (_store, r) = reopen(dir.path(), &clock);
    assert_eq!(&r.get(&key(2)).unwrap().data[..], &data(2)[..], "the repair supersedes the damage found again by the rescan");
    assert!(r.damage().is_empty());
}

/// A flipped byte in a record's header hides its key (and whether it was a
/// delete): every record after it is still found; every key put before it
/// answers "damaged", since the range may have held its tombstone; and the
/// replica stops claiming any key absent.
#[test]
fn a_damaged_header_keeps_later_records_and_guards_earlier_ones() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let log = puts_then_crash(dir.path(), 30, &clock);
    // Two damaged bytes per header: one alone is repaired from the header's
    // CRC (`a_flipped_header_byte_in_the_last_record_is_damage_not_a_torn_tail`).
    flip(&log.path, log.offsets[2] + 9); // the length field: the key is still named
    flip(&log.path, log.offsets[2] + 13);
    flip(&log.path, log.offsets[6]); // the magic: the key is unknown
    flip(&log.path, log.offsets[6] + 1);
    let (_store, r) = reopen(dir.path(), &clock);
    for i in 7..30 {
        assert_eq!(&r.get(&key(i)).unwrap().data[..], &data(i)[..], "blob {i}");
    }
    for i in 0..7 {
        assert_damaged(&r, &key(i));
    }
    let keys: Vec<_> = r.damage().into_iter().map(|d| (d.key, d.hides_others, d.after_lsn)).collect();
    assert_eq!(keys, vec![(Some(key(2)), true, log.lsns[1]), (None, true, log.lsns[5])]);
    assert!(matches!(r.get(&key(999)), Err(EngineError::Damaged { .. })), "a key the replica never held may have been in the damage");
    // Deleting is always allowed, and then the key reads as deleted.
    r.submit(WriteOp::Delete { key: key(5) }).wait().unwrap();
    assert!(matches!(r.get(&key(5)), Err(EngineError::Deleted)));
    // A comparison with a peer (the scrubber's) settles ranges that name no key.
    assert!(r.settle_damage(u64::MAX).unwrap());
    assert_eq!(&r.get(&key(0)).unwrap().data[..], &data(0)[..]);
    assert_damaged(&r, &key(2));
}

/// A whole last record that fails its CRC is damage, not a torn tail: it
/// stays (quarantined) and new writes go after it.
#[test]
fn a_damaged_last_record_is_quarantined_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let log = puts_then_crash(dir.path(), 5, &clock);
    flip(&log.path, log.offsets[4] + 500);
    let (_store, r) = reopen(dir.path(), &clock);
    assert_damaged(&r, &key(4));
    assert_eq!(r.stats().torn_bytes_truncated.load(Ordering::Relaxed), 0);
    r.submit(put(5)).wait().unwrap();
    r.close_without_flush();
    let (_store, r) = reopen(dir.path(), &clock);
    assert_damaged(&r, &key(4));
    for i in [0, 1, 2, 3, 5] {
        assert_eq!(&r.get(&key(i)).unwrap().data[..], &data(i)[..], "blob {i}");
    }
}

/// Damage in a sealed segment is never cut off: the segment was whole when
/// sealed, so whatever fails there is quarantined and the rest kept.
#[test]
fn damage_at_the_end_of_a_sealed_segment_is_not_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let cfg = EngineConfig { segment_bytes: 12_000, record_bytes_max: 4_000, ..config() };
    let store = Store::open(dir.path(), cfg.clone(), Arc::new(clock.clone())).unwrap();
    let r = store.create_replica(1).unwrap();
    for i in 0..12 {
        r.submit(put(i)).wait().unwrap();
    }
    r.close_without_flush();
    let seg0 = r.dir().join("seg-00000000-g0000.log");
    let len0 = std::fs::metadata(&seg0).unwrap().len();
    drop((r, store));
    // Lose the sealed segment's index so recovery scans it, and damage its
    // last record, so nothing valid follows in that segment.
    for e in std::fs::read_dir(dir.path().join("partitions/00000001")).unwrap().flatten() {
        if e.file_name().to_string_lossy().starts_with("seg-00000000-g0000-") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let rec_len = put(0).record_len("") as u64;
    flip(&seg0, len0 - rec_len + 1000);
    let store = Store::open(dir.path(), cfg, Arc::new(clock.clone())).unwrap();
    let r = store.replica(1).unwrap();
    assert_eq!(std::fs::metadata(&seg0).unwrap().len(), len0, "a sealed segment is never truncated");
    let bad: Vec<u32> = (0..12).filter(|i| r.get(&key(*i)).is_err()).collect();
    assert_eq!(bad.len(), 1, "exactly the damaged record: {bad:?}");
    assert!(matches!(r.get(&key(bad[0])), Err(EngineError::Damaged { .. })));
}

/// Item 2 of the integrity issue: after recovery cuts records off a log,
/// new writes must not reuse their lsns, or peers whose tokens passed them
/// never pull the new writes.
#[test]
fn lsns_never_repeat_after_recovery_cuts_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let log = puts_then_crash(dir.path(), 10, &clock);
    let highest = *log.lsns.last().unwrap();
    // Cut the log in the middle of its 8th record, as a torn tail would
    // look: records 8 to 10 (acknowledged, perhaps pulled by peers) go.
    let f = std::fs::OpenOptions::new().write(true).open(&log.path).unwrap();
    f.set_len(log.offsets[7] + 100).unwrap();
    drop(f);
    let (_store, r) = reopen(dir.path(), &clock);
    assert!(r.get(&key(9)).is_err());
    let lsn = r.submit(put(100)).wait().unwrap().lsn;
    assert!(lsn > highest, "lsn {lsn} repeats one handed out before the cut (up to {highest})");
    // The journal still serves a peer that was fully caught up.
    let since = r.journal_since(highest, 10).expect("the journal reaches back to the peer's token");
    assert_eq!(since.iter().map(|e| e.lsn).collect::<Vec<_>>(), vec![lsn]);
}

/// Bit rot found by a read (the record indexed, its bytes changed on disk
/// later) quarantines the key on the spot, and the knowledge survives a restart.
#[test]
fn damage_found_by_a_read_is_quarantined_and_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000);
    let store = Store::open(dir.path(), config(), Arc::new(clock.clone())).unwrap();
    let r = store.create_replica(1).unwrap();
    for i in 0..4 {
        r.submit(put(i)).wait().unwrap();
    }
    let off = r.get(&key(1)).unwrap().file_range.unwrap().offset;
    flip(&r.dir().join("seg-00000000-g0000.log"), off + 10);
    assert_damaged(&r, &key(1));
    assert_eq!(r.stats().damage_found.load(Ordering::Relaxed), 1);
    assert_eq!(&r.get(&key(3)).unwrap().data[..], &data(3)[..]);
    assert!(matches!(r.submit(WriteOp::TtlUpdate { key: key(1), expiry_ms: 0 }).wait(), Err(EngineError::Damaged { .. })));
    r.close();
    drop((r, store));
    let (_store, r) = reopen(dir.path(), &clock);
    assert_damaged(&r, &key(1));
    assert_eq!(&r.get(&key(3)).unwrap().data[..], &data(3)[..], "a damaged put hides no other key");
    assert!(matches!(r.get(&key(77)), Err(EngineError::Damaged { .. })), "but absence is unsure: key 77's put may have been what was damaged");
}

/// Found by the fault suite ("deleted blob … is back" after a kill -9): a
/// second delete of a key in the same batch as the first was answered
/// "already deleted" — which the router acknowledges as a delete — before
/// the first delete was durable. If the batch then fails (or the process
/// dies before its fdatasync), the delete acknowledged twice never
/// happened. Writes judged against a write of their own batch are now
/// answered only after it is durable, and fail with it.
#[test]
fn a_delete_refused_as_already_deleted_is_answered_only_once_the_first_delete_is_durable() {
    let mut caught_together = 0;
    for attempt in 0..20u32 {
        let dir = tempfile::tempdir().unwrap();
        let fail = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let clock = ManualClock::new(1_000);
        let cfg = EngineConfig { fail_appends: Some(fail.clone()), ..config() };
        let store = Store::open(dir.path(), cfg, Arc::new(clock)).unwrap();
        let r = store.create_replica(0).unwrap();
        r.submit(put(attempt)).wait().unwrap();
        fail.store(true, Ordering::SeqCst);
        // Many deletes at once: some share a batch with the first one.
        let pending: Vec<_> = (0..64).map(|_| r.submit(WriteOp::Delete { key: key(attempt) })).collect();
        let answers: Vec<_> = pending.into_iter().map(|p| p.wait()).collect();
        let deleted = answers.iter().filter(|a| matches!(a, Err(EngineError::Deleted))).count();
        assert!(answers.iter().all(|a| a.is_err()), "attempt {attempt}: a delete succeeded although every append failed");
        assert_eq!(deleted, 0, "attempt {attempt}: {deleted} deletes answered 'already deleted' for a delete that never became durable");
        let io = answers.iter().filter(|a| matches!(a, Err(EngineError::Io { .. }))).count();
        caught_together += usize::from(io > 1);
        drop(r);
        store.close();
        // The put is still there: nothing was deleted.
        let store = Store::open(dir.path(), config(), Arc::new(ManualClock::new(1_000))).unwrap();
        let r = store.replica(0).unwrap();
        assert!(r.get(&key(attempt)).is_ok(), "attempt {attempt}: the blob is gone although no delete was durable");
        store.close();
    }
    // The case must actually have arisen: deletes batched with the failing one.
    assert!(caught_together > 0, "no attempt put two deletes in one batch");
}

/// Found by the fault suite ("the delete of … was lost: 404"): a flipped
/// byte in the length of the active segment's last record — an
/// acknowledged tombstone — made it look like a torn write, so recovery
/// cut it and the delete was gone. One damaged header byte is now
/// repaired from the header's CRC: the record is quarantined, its key
/// answers "damaged", never "not found" or the deleted blob.
#[test]
fn a_flipped_header_byte_in_the_last_record_is_damage_not_a_torn_tail() {
    for (what, at, x) in [("length", 10u64, 0x40u8), ("key length", 6, 0x01), ("lsn", 13, 0x5a), ("magic", 1, 0xff)] {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_000);
        let store = Store::open(dir.path(), config(), Arc::new(clock.clone())).unwrap();
        let r = store.create_replica(1).unwrap();
        r.submit(put(1)).wait().unwrap();
        r.submit(put(2)).wait().unwrap();
        let tombstone_at = (strata_format::headers::SEGMENT_HEADER_BYTES + 2 * put(1).record_len("")) as u64;
        r.submit(WriteOp::Delete { key: key(1) }).wait().unwrap();
        r.close_without_flush();
        let path = r.dir().join("seg-00000000-g0000.log");
        drop(r);
        drop(store);
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let mut b = [0u8];
        f.read_exact_at(&mut b, tombstone_at + at).unwrap();
        f.write_all_at(&[b[0] ^ x], tombstone_at + at).unwrap();
        f.sync_all().unwrap();
        let (store, r) = reopen(dir.path(), &clock);
        assert!(matches!(r.get(&key(1)), Err(EngineError::Damaged { .. })), "{what}: the deleted blob answers {:?}", r.get(&key(1)).map(|b| b.size));
        assert_eq!(r.get(&key(2)).unwrap().data[..], data(2)[..], "{what}: the other blob");
        store.close();
    }
}

//! Versioned records (`versions.rs`): lookups across versions through the
//! memtable, index files and reopen; each kind's retention in compaction;
//! tombstones reclaimed only past the horizon; a directory written by the
//! previous format; and acknowledged versions surviving kill -9 of a real
//! writer process.

use bytes::Bytes;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::sync::Arc;
use strata_engine::{EngineConfig, EngineError, KeyState, Store, WriteOp};
use strata_format::PutProps;
use strata_types::{Key, KeyKind, ManualClock};

fn config() -> EngineConfig {
    EngineConfig { segment_bytes: 16 * 1024, record_bytes_max: 4 * 1024, index_flush_entries: 4, disk_reserve_bytes: 0, ..EngineConfig::default() }
}

fn open(dir: &Path, clock: &ManualClock) -> Store {
    Store::open(dir, config(), Arc::new(clock.clone())).unwrap()
}

fn vkey(kind: KeyKind, body: &str, v: u64) -> Key {
    Key::versioned(kind, body.as_bytes(), v).unwrap()
}

fn value(body: &str, v: u64) -> Vec<u8> {
    format!("{body}@{v}:").repeat(1 + (v as usize % 7)).into_bytes()
}

fn put(key: &Key) -> WriteOp {
    let (body, v) = (String::from_utf8(key.versioned_body().unwrap().to_vec()).unwrap(), key.version().unwrap());
    WriteOp::Put { key: key.clone(), props: PutProps::default(), data: Bytes::from(value(&body, v)) }
}

fn data_of(r: Option<strata_engine::BlobRecord>) -> Option<(u64, Vec<u8>)> {
    r.map(|r| (r.key.version().unwrap(), r.data.to_vec()))
}

#[test]
fn newest_floor_and_every_version_across_memtable_index_files_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let mut store = open(dir.path(), &clock);
    let mut r = store.create_replica(1).unwrap();
    let k = |v| vkey(KeyKind::ChunkVersion, "chunk", v);
    // A neighbour whose body is a prefix-sharing longer one must not mix in.
    let other = |v| vkey(KeyKind::ChunkVersion, "chunk2", v);
    for v in [3, 10, 7, 1 << 40] {
        r.submit(put(&k(v))).wait().unwrap();
        r.submit(put(&other(v + 1))).wait().unwrap();
    }
    r.submit(WriteOp::Delete { key: k(7) }).wait().unwrap();
    let check = |r: &strata_engine::Replica| {
        assert_eq!(r.versions(&k(0)).unwrap(), vec![3, 10, 1 << 40]);
        let live: Vec<_> = r.live_versions(&k(0)).unwrap().into_iter().map(|b| data_of(Some(b))).collect();
        assert_eq!(live, [3, 10, 1 << 40].map(|v| Some((v, value("chunk", v)))).to_vec());
        assert_eq!(data_of(r.newest(&k(0)).unwrap()), Some((1 << 40, value("chunk", 1 << 40))));
        assert_eq!(data_of(r.floor(&k(9)).unwrap()), Some((3, value("chunk", 3))), "7 is deleted: the floor of 9 is 3");
        assert_eq!(data_of(r.floor(&k(10)).unwrap()), Some((10, value("chunk", 10))));
        assert_eq!(data_of(r.floor(&k(2)).unwrap()), None);
        let states = r.version_states(&k(0)).unwrap();
        assert_eq!(states.iter().map(|(v, _)| *v).collect::<Vec<_>>(), vec![3, 7, 10, 1 << 40]);
        assert_eq!(states[1].1, KeyState::Deleted);
        assert_eq!(r.versions(&other(0)).unwrap(), vec![4, 8, 11, (1 << 40) + 1]);
        assert!(matches!(r.versions(&Key::new(KeyKind::Blob, b"b").unwrap()), Err(EngineError::Invalid(_))));
    };
    check(&r);
    // A live version is written once; a deleted one may be written again
    // (a restore), and is live until deleted again.
    assert!(matches!(r.submit(put(&k(10))).wait(), Err(EngineError::AlreadyExists)));
    r.submit(put(&k(7))).wait().unwrap();
    assert_eq!(r.versions(&k(0)).unwrap(), vec![3, 7, 10, 1 << 40]);
    r.submit(WriteOp::Delete { key: k(7) }).wait().unwrap();
    let blob = Key::new(KeyKind::Blob, b"blob").unwrap();
    let blob_put = || WriteOp::Put { key: blob.clone(), props: PutProps::default(), data: Bytes::from_static(b"b") };
    r.submit(blob_put()).wait().unwrap();
    r.submit(WriteOp::Delete { key: blob.clone() }).wait().unwrap();
    assert!(matches!(r.submit(blob_put()).wait(), Err(EngineError::AlreadyExists)), "a blob id is never written again");
    drop(r);
    store.close();
    store = open(dir.path(), &clock);
    r = store.replica(1).unwrap();
    check(&r);
    // Expiry hides a version like a delete.
    let props = PutProps { expiry_ms: strata_types::Clock::now_ms(&clock) + 50, ..PutProps::default() };
    r.submit(WriteOp::Put { key: k(u64::MAX), props, data: Bytes::from_static(b"short-lived") }).wait().unwrap();
    assert_eq!(r.newest(&k(0)).unwrap().unwrap().key.version(), Some(u64::MAX));
    clock.advance(100);
    assert_eq!(r.newest(&k(0)).unwrap().unwrap().key.version(), Some(1 << 40));
}

#[test]
fn compaction_keeps_what_each_kind_retains() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let store = open(dir.path(), &clock);
    let r = store.create_replica(1).unwrap();
    let tract = |v| vkey(KeyKind::Tract, "tract", v);
    let chunk = |v| vkey(KeyKind::ChunkVersion, "chunk", v);
    let kv = |v| vkey(KeyKind::KvValue, "kv", v);
    for v in 1..=6 {
        for k in [tract(v), chunk(v), kv(v)] {
            r.submit(put(&k)).wait().unwrap();
        }
    }
    r.compact(true).unwrap();
    assert_eq!(r.versions(&tract(0)).unwrap(), vec![6], "a tract keeps its newest version only");
    assert_eq!(data_of(r.newest(&tract(0)).unwrap()), Some((6, value("tract", 6))));
    assert_eq!(r.versions(&chunk(0)).unwrap(), (1..=6).collect::<Vec<_>>(), "chunk versions stay until deleted");
    assert_eq!(r.versions(&kv(0)).unwrap(), (1..=6).collect::<Vec<_>>());
    for v in 1..=6 {
        assert_eq!(data_of(r.get(&chunk(v)).ok()), Some((v, value("chunk", v))));
    }
    // A deleted newest tract version leaves no older one behind.
    r.submit(WriteOp::Delete { key: tract(6) }).wait().unwrap();
    assert_eq!(data_of(r.newest(&tract(0)).unwrap()), None);
}

#[test]
fn tombstones_of_versions_go_only_past_the_horizon() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let store = open(dir.path(), &clock);
    let r = store.create_replica(1).unwrap();
    let k = |v| vkey(KeyKind::KvValue, "key", v);
    let blob = Key::new(KeyKind::Blob, b"blob").unwrap();
    for v in 1..=4 {
        r.submit(put(&k(v))).wait().unwrap();
    }
    r.submit(WriteOp::Put { key: blob.clone(), props: PutProps::default(), data: Bytes::from_static(b"b") }).wait().unwrap();
    let mut deletes = Vec::new();
    for v in 1..=3 {
        deletes.push(r.submit(WriteOp::Delete { key: k(v) }).wait().unwrap().lsn);
    }
    r.submit(WriteOp::Delete { key: blob.clone() }).wait().unwrap();
    let states = |r: &strata_engine::Replica| r.version_states(&k(0)).unwrap().into_iter().map(|(v, s)| (v, s == KeyState::Deleted)).collect::<Vec<_>>();
    r.compact(true).unwrap();
    assert_eq!(states(&r), vec![(1, true), (2, true), (3, true), (4, false)], "no horizon: every tombstone stays");
    // Every replica has the first two deletes: their tombstones go.
    r.set_reclaim_horizon(deletes[1]);
    r.compact(true).unwrap();
    assert_eq!(states(&r), vec![(3, true), (4, false)]);
    assert_eq!(r.state_of(&k(1)), KeyState::Missing);
    assert_eq!(r.state_of(&blob), KeyState::Deleted, "blob tombstones stay whatever the horizon");
    // A reclaimed version can be written again (it is unknown here now).
    r.submit(put(&k(1))).wait().unwrap();
    assert_eq!(r.versions(&k(0)).unwrap(), vec![1, 4]);
    r.set_reclaim_horizon(0);
    assert_eq!(r.reclaim_horizon(), deletes[1], "the horizon only rises");
}

/// A data directory written by the release before versioned records
/// (record format 2, index format 1, commit bedf00d): twelve blobs put by
/// that release's engine, blob 2 deleted, blob 5's expiry changed. It opens
/// unchanged, reads back whole, and takes versioned records beside its blobs.
#[test]
fn a_directory_of_the_previous_format_opens_unchanged() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-v2");
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture, dir.path());
    let clock = ManualClock::new(1_700_000_100_000);
    let verify_blobs = |r: &strata_engine::Replica| {
        for i in 0..12u8 {
            let key = Key::new(KeyKind::Blob, &[i; 16]).unwrap();
            if i == 2 {
                assert_eq!(r.state_of(&key), KeyState::Deleted);
                continue;
            }
            let b = r.get(&key).unwrap_or_else(|e| panic!("blob {i}: {e}"));
            let want: Vec<u8> = (0..(300 + i as usize * 97)).map(|j| (j as u8).wrapping_mul(i + 1)).collect();
            assert_eq!(&b.data[..], &want[..], "blob {i}");
            assert_eq!((b.props.owner.as_str(), b.props.content_type.as_str()), (format!("owner-{i}").as_str(), "application/x-fixture"));
            assert_eq!(b.expiry_ms, if i == 5 { 4_000_000_000_000 } else { 0 }, "blob {i}");
            assert_eq!(b.actor, "", "a record before format 4 names nobody");
        }
    };
    // A version 4 record beside them names who wrote it, across a restart
    // (the journal rebuilt from the log) and a compaction.
    let new_key = Key::new(KeyKind::Blob, &[99; 16]).unwrap();
    let new_put = || WriteOp::Put { key: new_key.clone(), props: PutProps::default(), data: Bytes::from_static(b"v4") };
    let check_new = |r: &strata_engine::Replica| assert_eq!(r.get(&new_key).unwrap().actor, "AKNEW");
    {
        let store = open(dir.path(), &clock);
        let r = store.replica(3).expect("the fixture's partition 3");
        verify_blobs(&r);
        for v in [2, 9] {
            r.submit(put(&vkey(KeyKind::Tract, "t", v))).wait().unwrap();
        }
        let lsn = r.submit_as(new_put(), Some(Arc::from("AKNEW"))).wait().unwrap().lsn;
        check_new(&r);
        store.close();
        let store = open(dir.path(), &clock);
        let r = store.replica(3).unwrap();
        let journal = r.journal_since(lsn - 1, 1).expect("the journal reaches the last record");
        assert_eq!(journal[0].actor.as_deref(), Some("AKNEW"), "the rebuilt journal names the writer");
        store.close();
    }
    let store = open(dir.path(), &clock);
    let r = store.replica(3).unwrap();
    verify_blobs(&r);
    check_new(&r);
    assert_eq!(r.versions(&vkey(KeyKind::Tract, "t", 0)).unwrap(), vec![2, 9]);
    r.compact(true).unwrap();
    verify_blobs(&r);
    assert_eq!(r.versions(&vkey(KeyKind::Tract, "t", 0)).unwrap(), vec![9]);
    check_new(&r);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The child of [`acknowledged_versions_survive_kill_9`]: writes versions
/// and deletes of versions of several kinds to the store in
/// `STRATA_VERSIONS_CHILD`, printing each acknowledgment, until killed.
#[test]
fn versions_crash_child() {
    let Ok(dir) = std::env::var("STRATA_VERSIONS_CHILD") else { return };
    let seed: u64 = std::env::var("STRATA_VERSIONS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let store = Store::open(Path::new(&dir), config(), Arc::new(strata_types::SystemClock)).unwrap();
    let r = store.replica(1).unwrap_or_else(|| store.create_replica(1).unwrap());
    let out = std::io::stdout();
    let kinds = [KeyKind::Tract, KeyKind::ChunkVersion, KeyKind::KvValue];
    let mut x = seed;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Versions rise per body: every run starts above what earlier runs wrote.
    let base: u64 = std::env::var("STRATA_VERSIONS_BASE").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    for i in 0.. {
        let kind = kinds[(next() % 3) as usize];
        let body = format!("b{}", next() % 16);
        let key = vkey(kind, &body, base + i);
        // Several writes in flight at once, so batches share an fsync.
        let pending: Vec<_> = (0..4u64).map(|j| key.with_version(base + i * 4 + j).unwrap()).map(|k| (k.clone(), r.submit(put(&k)))).collect();
        for (k, p) in pending {
            p.wait().unwrap();
            writeln!(out.lock(), "put {} {} {}", k.kind() as u8, String::from_utf8_lossy(k.versioned_body().unwrap()), k.version().unwrap()).unwrap();
        }
        if next() % 3 == 0 {
            let victim = key.with_version(base + i * 4 + 1).unwrap();
            r.submit(WriteOp::Delete { key: victim.clone() }).wait().unwrap();
            writeln!(out.lock(), "del {} {} {}", victim.kind() as u8, body, victim.version().unwrap()).unwrap();
        }
    }
}

/// Kill -9 of a real process writing versioned records, three times over
/// the same directory: every version it acknowledged reads back whole
/// after each reopen, every delete it acknowledged holds, and the newest
/// of each body is the newest acknowledged (tracts keep only that one).
#[test]
fn acknowledged_versions_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked_puts: std::collections::BTreeSet<(u8, String, u64)> = Default::default();
    let mut acked_dels: std::collections::BTreeSet<(u8, String, u64)> = Default::default();
    for round in 0..3u64 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "versions_crash_child", "--nocapture", "--test-threads", "1"])
            .env("STRATA_VERSIONS_CHILD", dir.path())
            .env("STRATA_VERSIONS_SEED", (round + 7).to_string())
            .env("STRATA_VERSIONS_BASE", ((round + 1) << 40).to_string())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap());
        let kill_after = 200 + round as usize * 150;
        let mut seen = 0;
        for line in lines.lines() {
            let line = line.unwrap();
            // The test harness may print its own words before the first line.
            let Some(at) = line.find("put ").or_else(|| line.find("del ")) else { continue };
            let mut f = line[at..].split(' ');
            let (Some(op), Some(kind), Some(body), Some(v)) = (f.next(), f.next(), f.next(), f.next()) else { continue };
            let entry = (kind.parse().unwrap(), body.to_string(), v.parse().unwrap());
            match op {
                "put" => acked_puts.insert(entry),
                "del" => acked_dels.insert(entry),
                _ => continue,
            };
            seen += 1;
            if seen == kill_after {
                // SIGKILL while writes are in flight.
                child.kill().unwrap();
            }
        }
        let status = child.wait().unwrap();
        assert!(seen >= kill_after, "the child stopped after {seen} acknowledgments: {status:?}");
        let clock = ManualClock::new(u64::MAX / 4);
        let store = Store::open(dir.path(), config(), Arc::new(clock)).unwrap();
        let r = store.replica(1).unwrap();
        let mut newest: std::collections::BTreeMap<(u8, String), u64> = Default::default();
        for (kind, body, v) in &acked_puts {
            let key = vkey(KeyKind::from_tag(*kind).unwrap(), body, *v);
            if acked_dels.contains(&(*kind, body.clone(), *v)) {
                assert_eq!(r.state_of(&key), KeyState::Deleted, "acknowledged delete of {key} lost");
                continue;
            }
            let n = newest.entry((*kind, body.clone())).or_default();
            *n = (*n).max(*v);
            if *kind == KeyKind::Tract as u8 {
                continue;
            }
            assert_eq!(r.get(&key).map(|b| b.data.to_vec()).ok(), Some(value(body, *v)), "acknowledged put of {key} lost after round {round}");
        }
        for ((kind, body), v) in newest {
            let key = vkey(KeyKind::from_tag(kind).unwrap(), &body, 0);
            let got = r.newest(&key).unwrap().unwrap();
            // An unacknowledged write may have landed above the newest acknowledged one.
            assert!(got.key.version().unwrap() >= v, "{key}: newest {:?} below the acknowledged {v}", got.key.version());
            let gv = got.key.version().unwrap();
            assert_eq!(got.data.to_vec(), value(&body, gv));
        }
        r.compact(true).unwrap();
        store.close();
    }
}

/// A tombstone past the horizon stays while its put is still on disk in a
/// segment the pass leaves alone (too little garbage to rewrite): dropping
/// it would bring the deleted version back.
#[test]
fn a_tombstone_outlives_its_put_in_a_segment_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let store = open(dir.path(), &clock);
    let r = store.create_replica(1).unwrap();
    let k = vkey(KeyKind::KvValue, "k", 1);
    let blob = |i: u8| Key::new(KeyKind::Blob, &[i; 8]).unwrap();
    let big = |i: u8| WriteOp::Put { key: blob(i), props: PutProps::default(), data: Bytes::from(vec![i; 4000]) };
    // Segment A: the version and three live blobs (a 16 KiB segment holds
    // no fourth); its garbage, once the version is deleted, is ~1%.
    r.submit(put(&k)).wait().unwrap();
    for i in 0..3 {
        r.submit(big(i)).wait().unwrap();
    }
    // Segment B: a blob put and deleted, and the version's tombstone.
    r.submit(big(3)).wait().unwrap();
    let del = r.submit(WriteOp::Delete { key: k.clone() }).wait().unwrap();
    r.submit(WriteOp::Delete { key: blob(3) }).wait().unwrap();
    r.set_reclaim_horizon(del.lsn);
    let report = r.compact(false).unwrap();
    assert_eq!(report.segments_compacted, 1, "only the mostly-garbage segment is rewritten: {report:?}");
    assert_eq!(r.state_of(&k), KeyState::Deleted, "the tombstone must stay while its put is on disk");
    // Once the put's segment is rewritten too, the tombstone can go.
    r.compact(true).unwrap();
    r.compact(true).unwrap();
    assert_eq!(r.state_of(&k), KeyState::Missing);
    for i in 0..3 {
        assert_eq!(&r.get(&blob(i)).unwrap().data[..], &vec![i; 4000][..]);
    }
}

/// A flipped byte in the newest version: the newest lookup answers
/// "damaged" (never the older version as if it were the newest), a floor
/// below it still answers, and a whole copy from a peer repairs it.
#[test]
fn a_damaged_newest_version_is_an_error_not_an_older_answer() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let cfg = || EngineConfig { tail_cache_bytes: 0, disk_reserve_bytes: 0, ..EngineConfig::default() };
    let k = |v| vkey(KeyKind::ChunkVersion, "c", v);
    let mut at = strata_format::headers::SEGMENT_HEADER_BYTES as u64;
    let path = {
        let store = Store::open(dir.path(), cfg(), Arc::new(clock.clone())).unwrap();
        let r = store.create_replica(1).unwrap();
        for v in 1..=3 {
            let op = put(&k(v));
            if v == 3 {
                at += op.record_len("") as u64 - 10;
            } else {
                at += op.record_len("") as u64;
            }
            r.submit(op).wait().unwrap();
        }
        r.close_without_flush();
        r.dir().join("seg-00000000-g0000.log")
    };
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
    f.sync_all().unwrap();
    let store = Store::open(dir.path(), cfg(), Arc::new(clock.clone())).unwrap();
    let r = store.replica(1).unwrap();
    assert!(matches!(r.newest(&k(0)), Err(EngineError::Damaged { .. })), "{:?}", r.newest(&k(0)).map(data_of));
    assert_eq!(data_of(r.floor(&k(2)).unwrap()), Some((2, value("c", 2))));
    let WriteOp::Put { key, props, data } = put(&k(3)) else { unreachable!() };
    r.submit(WriteOp::ReplicaPut { key, props, data, created_ms: 1 }).wait().unwrap();
    assert_eq!(data_of(r.newest(&k(0)).unwrap()), Some((3, value("c", 3))));
}

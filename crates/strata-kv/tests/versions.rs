//! Versions of a store: build, load, swap and roll back while readers run
//! (no failed read, no read seeing two versions, no return to version 1
//! after version 2 was seen until the rollback), and every kind of damaged
//! version rejected with the file named while the live one keeps serving.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use strata_kv::{Duplicates, ReadOnlyStore, Search, StoreDef, VersionError, build_in_memory};

fn def() -> StoreDef {
    StoreDef { name: "profiles".into(), partitions: 4, replication: 1, chunks: 3 }
}

fn records(version: u8, n: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..n).map(|i| (format!("member-{i}").into_bytes(), format!("v{version}:{i}").into_bytes())).collect()
}

#[test]
fn swap_and_rollback_under_concurrent_readers() {
    let tmp = tempfile::tempdir().unwrap();
    let n = 2_000;
    for v in [1u8, 2] {
        build_in_memory(&def(), records(v, n), &tmp.path().join(format!("built-{v}")), Duplicates::Fail).unwrap();
    }
    let store = Arc::new(ReadOnlyStore::open(&tmp.path().join("store"), def(), 2, Search::Interpolation).unwrap());
    assert_eq!(store.get(b"member-1").unwrap(), None, "no live version yet");
    let v1 = store.load(&tmp.path().join("built-1"), None).unwrap();
    store.swap(v1).unwrap();
    let v2 = store.load(&tmp.path().join("built-2"), None).unwrap();
    assert_eq!((v1, v2), (1, 2));

    let stop = Arc::new(AtomicBool::new(false));
    let rolled_back = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..4)
        .map(|t| {
            let (store, stop, rolled_back, reads) = (store.clone(), stop.clone(), rolled_back.clone(), reads.clone());
            std::thread::spawn(move || {
                let mut saw_two = false;
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    // A multi-get: all from one version.
                    let keys: Vec<Vec<u8>> = (0..8).map(|j| format!("member-{}", (i * 31 + j * 97) % n).into_bytes()).collect();
                    let vals = store.multi_get(&keys).expect("a read failed");
                    let version: Vec<u8> = vals.iter().map(|v| v.as_ref().expect("a key went missing")[1]).collect();
                    assert!(version.iter().all(|&b| b == version[0]), "one multi-get saw two versions: {version:?}");
                    if version[0] == b'2' {
                        saw_two = true;
                    } else if saw_two && !rolled_back.load(Ordering::SeqCst) {
                        panic!("a reader saw version 2 and then version 1 before any rollback");
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(100));
    store.swap(v2).unwrap();
    assert_eq!(store.get(b"member-7").unwrap().unwrap(), b"v2:7");
    std::thread::sleep(std::time::Duration::from_millis(100));
    rolled_back.store(true, Ordering::SeqCst);
    assert_eq!(store.rollback(None).unwrap(), 1);
    assert_eq!(store.get(b"member-7").unwrap().unwrap(), b"v1:7");
    std::thread::sleep(std::time::Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().expect("a reader failed");
    }
    assert!(reads.load(Ordering::Relaxed) > 100);
    // The live version survives a reopen.
    drop(store);
    let again = ReadOnlyStore::open(&tmp.path().join("store"), def(), 2, Search::Binary).unwrap();
    assert_eq!(again.live_version(), Some(1));
    assert_eq!(again.get(b"member-1999").unwrap().unwrap(), b"v1:1999");
    assert_eq!(again.get(b"not-a-member").unwrap(), None);
}

fn rejected(store: &ReadOnlyStore, src: &std::path::Path, what: &str) -> String {
    let e = store.load(src, None).expect_err(what);
    let msg = e.to_string();
    assert_eq!(store.get(b"member-3").unwrap().unwrap(), b"v1:3", "the live version stopped serving after {what}");
    msg
}

#[test]
fn damaged_versions_are_rejected_and_the_live_one_keeps_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good");
    build_in_memory(&def(), records(1, 500), &good, Duplicates::Fail).unwrap();
    let store = ReadOnlyStore::open(&tmp.path().join("store"), def(), 1, Search::Binary).unwrap();
    store.swap(store.load(&good, None).unwrap()).unwrap();

    let copy = |name: &str| {
        let d = tmp.path().join(name);
        build_in_memory(&def(), records(2, 500), &d, Duplicates::Fail).unwrap();
        d
    };
    // Truncated chunk file.
    let d = copy("truncated");
    let f = d.join("1_0_2.data");
    let b = std::fs::read(&f).unwrap();
    std::fs::write(&f, &b[..b.len() - 10]).unwrap();
    let m = rejected(&store, &d, "a truncated chunk");
    assert!(m.contains("1_0_2.data") && m.contains("truncated"), "{m}");
    // A flipped byte: the checksum.
    let d = copy("flipped");
    let f = d.join("0_0_1.index");
    let mut b = std::fs::read(&f).unwrap();
    let last = b.len() - 1;
    b[last] ^= 0x55;
    std::fs::write(&f, &b).unwrap();
    let m = rejected(&store, &d, "a corrupt chunk");
    assert!(m.contains("0_0_1.index") && m.contains("corrupt"), "{m}");
    // A missing chunk.
    let d = copy("missing");
    std::fs::remove_file(d.join("3_0_0.index")).unwrap();
    let m = rejected(&store, &d, "a missing chunk");
    assert!(m.contains("3_0_0.index") && m.contains("missing"), "{m}");
    // A different ring.
    let d = tmp.path().join("other-ring");
    build_in_memory(&StoreDef { partitions: 8, ..def() }, records(2, 100), &d, Duplicates::Fail).unwrap();
    let m = rejected(&store, &d, "another ring");
    assert!(m.contains("8 partitions"), "{m}");
    // No metadata.
    let d = copy("no-metadata");
    std::fs::remove_file(d.join(".metadata")).unwrap();
    let m = rejected(&store, &d, "no metadata");
    assert!(m.contains(".metadata"), "{m}");
    assert_eq!(store.versions(), vec![1]);
}

#[test]
fn duplicate_keys_fail_the_build_or_last_wins() {
    let tmp = tempfile::tempdir().unwrap();
    let mut recs = records(1, 50);
    recs.push((b"member-7".to_vec(), b"again".to_vec()));
    let e = build_in_memory(&def(), recs.clone(), &tmp.path().join("a"), Duplicates::Fail).unwrap_err();
    assert!(matches!(&e, VersionError::Format(strata_kv::FormatError::DuplicateKey(k)) if k == b"member-7"), "{e}");
    let r = build_in_memory(&def(), recs, &tmp.path().join("b"), Duplicates::LastWins).unwrap();
    assert_eq!((r.records, r.duplicates_dropped), (50, 1));
    let store = ReadOnlyStore::open(&tmp.path().join("s"), def(), 1, Search::Binary).unwrap();
    store.swap(store.load(&tmp.path().join("b"), None).unwrap()).unwrap();
    assert_eq!(store.get(b"member-7").unwrap().unwrap(), b"again");
}

fn dir_bytes(d: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(d).unwrap().map(|e| e.unwrap()).map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())).collect()
}

/// The output depends only on the records: spilling to sorted runs under a
/// small memory limit, and shuffling the input, give the same bytes as an
/// in-memory build.
#[test]
fn external_sort_gives_the_same_bytes_as_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let mut recs: Vec<(Vec<u8>, Vec<u8>)> = (0..20_000u32).map(|i| (format!("k{i}").into_bytes(), vec![(i % 251) as u8; (i % 97) as usize])).collect();
    recs.push((b"k5".to_vec(), b"last".to_vec()));
    let a = strata_kv::build_in_memory(&def(), recs.clone(), &tmp.path().join("mem"), Duplicates::LastWins).unwrap();
    let mut shuffled = recs.clone();
    // A fixed permutation that keeps the duplicate after its first copy.
    let dup = shuffled.pop().unwrap();
    shuffled.reverse();
    shuffled.push(dup);
    let b = strata_kv::build_with_memory(&def(), shuffled, &tmp.path().join("ext"), Duplicates::LastWins, 64 << 10).unwrap();
    assert!(b.runs > 5, "the small limit should spill ({} runs)", b.runs);
    assert_eq!((a.records, a.duplicates_dropped), (b.records, b.duplicates_dropped));
    assert_eq!(dir_bytes(&tmp.path().join("mem")), dir_bytes(&tmp.path().join("ext")));
    let store = ReadOnlyStore::open(&tmp.path().join("s"), def(), 1, Search::Binary).unwrap();
    store.swap(store.load(&tmp.path().join("ext"), None).unwrap()).unwrap();
    assert_eq!(store.get(b"k5").unwrap().unwrap(), b"last");
    assert_eq!(store.get(b"k19999").unwrap().unwrap(), vec![(19_999 % 251) as u8; 19_999 % 97]);
    // Without last-wins, the same key in two runs fails the build, naming it.
    let e = strata_kv::build_with_memory(&def(), recs, &tmp.path().join("fail"), Duplicates::Fail, 64 << 10).unwrap_err();
    assert!(e.to_string().contains("duplicate key \"k5\""), "{e}");
}

/// A load reports its phase and bytes copied while it runs, and nothing
/// once it is done.
#[test]
fn load_reports_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let recs: Vec<(Vec<u8>, Vec<u8>)> = (0..100_000u32).map(|i| (format!("k{i}").into_bytes(), vec![b'x'; 300])).collect();
    strata_kv::build_in_memory(&def(), recs, &tmp.path().join("b"), Duplicates::Fail).unwrap();
    let store = Arc::new(ReadOnlyStore::open(&tmp.path().join("s"), def(), 1, Search::Binary).unwrap());
    let loader = {
        let (store, src) = (store.clone(), tmp.path().join("b"));
        std::thread::spawn(move || store.load(&src, None))
    };
    let mut seen = Vec::new();
    while !loader.is_finished() {
        if let Some(p) = store.load_progress() {
            seen.push(p);
        }
    }
    assert_eq!(loader.join().unwrap().unwrap(), 1);
    assert!(store.load_progress().is_none());
    let copying: Vec<_> = seen.iter().filter(|p| p.phase == "copying").collect();
    assert!(!copying.is_empty(), "never saw the copy in progress ({} samples)", seen.len());
    assert!(copying.iter().all(|p| p.copied <= p.total && p.total > 30_000_000 && p.version == 1));
    assert!(copying.windows(2).all(|w| w[0].copied <= w[1].copied), "progress went backwards");
}

/// A loaded version's CRCs were checked as it was copied in (`.verified`),
/// so a swap checks sizes only: a truncated file is still refused. Without
/// the marker the swap re-reads every CRC and refuses a flipped byte.
#[test]
fn swap_trusts_checked_copies_but_not_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let recs: Vec<(Vec<u8>, Vec<u8>)> = (0..2000u32).map(|i| (format!("k{i}").into_bytes(), vec![b'v'; 50])).collect();
    strata_kv::build_in_memory(&def(), recs, &tmp.path().join("b"), Duplicates::Fail).unwrap();
    let store = ReadOnlyStore::open(&tmp.path().join("s"), def(), 3, Search::Binary).unwrap();
    let n = store.load(&tmp.path().join("b"), None).unwrap();
    let dir = tmp.path().join("s").join(format!("version-{n}"));
    assert!(dir.join(".verified").exists());
    let data = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).find(|p| p.extension().is_some_and(|e| e == "data")).unwrap();
    let good = std::fs::read(&data).unwrap();
    std::fs::write(&data, &good[..good.len() - 1]).unwrap();
    assert!(store.swap(n).unwrap_err().to_string().contains("truncated"));
    let mut bad = good.clone();
    bad[20] ^= 1;
    std::fs::write(&data, &bad).unwrap();
    std::fs::remove_file(dir.join(".verified")).unwrap();
    assert!(store.swap(n).unwrap_err().to_string().contains("corrupt"));
    std::fs::write(&data, &good).unwrap();
    store.swap(n).unwrap();
    assert_eq!(store.get(b"k1").unwrap().unwrap(), vec![b'v'; 50]);
}

/// Every load, swap and rollback is recorded with its identity and time in
/// `latest`, atomically with the swap; the record survives a reopen, a load
/// cut off before its record is recorded at the next open, and a store
/// written before the history (a bare `version-N`) still opens.
#[test]
fn version_changes_are_recorded_with_the_swap_and_survive_a_reopen() {
    use strata_kv::{By, ChangeKind};
    let tmp = tempfile::tempdir().unwrap();
    for v in [1u8, 2, 3] {
        build_in_memory(&def(), records(v, 50), &tmp.path().join(format!("built-{v}")), Duplicates::Fail).unwrap();
    }
    let root = tmp.path().join("store");
    let store = ReadOnlyStore::open(&root, def(), 3, Search::Interpolation).unwrap();
    let by = |t: u64| By::new(Some("AKADMIN".into()), t);
    let v1 = store.load_by(&tmp.path().join("built-1"), None, &by(10)).unwrap();
    store.swap_by(v1, &by(11)).unwrap();
    let v2 = store.load_by(&tmp.path().join("built-2"), None, &by(12)).unwrap();
    store.swap_by(v2, &by(13)).unwrap();
    assert_eq!(store.rollback_by(None, &by(14)).unwrap(), 1);
    let seen = |s: &ReadOnlyStore, after: u64| -> Vec<(u64, ChangeKind, u64, Option<String>)> {
        let (changes, reaches) = s.changes_after(after);
        assert!(reaches);
        changes.into_iter().map(|c| (c.seq, c.kind, c.version, c.who)).collect()
    };
    let want = vec![
        (1, ChangeKind::Loaded, 1, Some("AKADMIN".to_owned())),
        (2, ChangeKind::Swapped, 1, Some("AKADMIN".to_owned())),
        (3, ChangeKind::Loaded, 2, Some("AKADMIN".to_owned())),
        (4, ChangeKind::Swapped, 2, Some("AKADMIN".to_owned())),
        (5, ChangeKind::RolledBack, 1, Some("AKADMIN".to_owned())),
    ];
    assert_eq!(seen(&store, 0), want);
    assert_eq!(seen(&store, 3), want[3..].to_vec());
    assert_eq!(store.changes_after(0).0[4].time_ms, 14);
    // A failed swap records nothing.
    assert!(store.swap_by(9, &by(15)).is_err());
    assert_eq!(store.last_change(), 5);
    drop(store);

    // A crash after a load moved its version in but before it was recorded.
    let staged = ReadOnlyStore::open(&tmp.path().join("other"), def(), 3, Search::Interpolation).unwrap();
    let v = staged.load(&tmp.path().join("built-3"), Some(3)).unwrap();
    std::fs::rename(tmp.path().join("other").join(format!("version-{v}")), root.join("version-3")).unwrap();
    let store = ReadOnlyStore::open(&root, def(), 3, Search::Interpolation).unwrap();
    assert_eq!(store.live_version(), Some(1));
    let after = seen(&store, 5);
    assert_eq!(after, vec![(6, ChangeKind::Loaded, 3, None)]);
    drop(store);
    // Reopening again records nothing more.
    assert_eq!(ReadOnlyStore::open(&root, def(), 3, Search::Interpolation).unwrap().last_change(), 6);

    // A store from before the history.
    std::fs::write(root.join("latest"), "version-2\n").unwrap();
    let store = ReadOnlyStore::open(&root, def(), 3, Search::Interpolation).unwrap();
    assert_eq!((store.live_version(), store.last_change()), (Some(2), 0));
    store.swap(3).unwrap();
    assert_eq!(seen(&store, 0).into_iter().map(|c| (c.1, c.2)).collect::<Vec<_>>(), vec![(ChangeKind::Swapped, 3)]);
    // A damaged file is refused with its name, not misread.
    drop(store);
    let text = std::fs::read_to_string(root.join("latest")).unwrap();
    std::fs::write(root.join("latest"), text.replacen("swapped 3", "swapped 2", 1)).unwrap();
    let e = ReadOnlyStore::open(&root, def(), 3, Search::Interpolation).err().expect("a damaged latest opened").to_string();
    assert!(e.contains("latest") && e.contains("checksum"), "{e}");
}

//! Property test: random sequences of put / delete / TTL update / get /
//! compaction / restart (clean or crash-like) / clock moves against a simple
//! in-memory model. Small segments and index thresholds make every path run.

use bytes::Bytes;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use strata_engine::{CompactionPhase, EngineConfig, EngineError, Store, WriteOp};
use strata_format::PutProps;
use strata_types::{Key, KeyKind, ManualClock};

#[derive(Debug, Clone)]
enum Op {
    Put { k: u8, len: usize, ttl: Option<u64> },
    Delete { k: u8 },
    Ttl { k: u8, ttl: Option<u64> },
    Get { k: u8 },
    Compact { crash_at: Option<bool> },
    Restart { clean: bool },
    Advance { ms: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..24u8, 0..1500usize, proptest::option::weighted(0.3, 1..60u64)).prop_map(|(k, len, ttl)| Op::Put { k, len, ttl }),
        2 => (0..24u8).prop_map(|k| Op::Delete { k }),
        1 => (0..24u8, proptest::option::of(1..60u64)).prop_map(|(k, ttl)| Op::Ttl { k, ttl }),
        4 => (0..24u8).prop_map(|k| Op::Get { k }),
        1 => proptest::option::weighted(0.3, any::<bool>()).prop_map(|crash_at| Op::Compact { crash_at }),
        1 => any::<bool>().prop_map(|clean| Op::Restart { clean }),
        1 => (0..40u64).prop_map(|ms| Op::Advance { ms }),
    ]
}

#[derive(Debug, Clone)]
struct Model {
    data: Vec<u8>,
    expiry_ms: u64,
    deleted: bool,
    /// Expired when a compaction ran: compaction may have dropped it.
    maybe_gone: bool,
}

fn config() -> EngineConfig {
    EngineConfig {
        segment_bytes: 8 * 1024,
        record_bytes_max: 4 * 1024,
        index_flush_entries: 5,
        journal_entries: 16,
        compaction_expiry_grace_ms: 0,
        disk_reserve_bytes: 0,
        ..EngineConfig::default()
    }
}

fn key(k: u8) -> Key {
    Key::new(KeyKind::Blob, &[k; 8]).unwrap()
}

fn payload(k: u8, len: usize, salt: u64) -> Vec<u8> {
    (0..len).map(|i| (i as u64).wrapping_mul(31).wrapping_add(k as u64 * 7 + salt) as u8).collect()
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let open = || Store::open(dir.path(), config(), Arc::new(clock.clone())).unwrap();
    let mut store = open();
    let mut replica = store.create_replica(7).unwrap();
    let mut model: BTreeMap<u8, Model> = BTreeMap::new();
    for (step, op) in ops.into_iter().enumerate() {
        let now = clock_now(&clock);
        let expired = |m: &Model| m.expiry_ms != 0 && m.expiry_ms <= now;
        match op {
            Op::Put { k, len, ttl } => {
                let data = payload(k, len, step as u64);
                let expiry_ms = ttl.map_or(0, |t| now + t);
                let props = PutProps { expiry_ms, content_type: "application/x-test".into(), owner: "o".into(), meta: vec![("step".into(), step.to_string())] };
                let r = replica.submit(WriteOp::Put { key: key(k), props, data: Bytes::from(data.clone()) }).wait();
                match model.get(&k) {
                    Some(m) if m.maybe_gone && !m.deleted => {
                        prop_assert!(matches!(r, Ok(_) | Err(EngineError::AlreadyExists)), "step {step}: {r:?}");
                        if r.is_ok() {
                            model.insert(k, Model { data, expiry_ms, deleted: false, maybe_gone: false });
                        }
                    }
                    Some(_) => prop_assert!(matches!(r, Err(EngineError::AlreadyExists)), "step {step}: {r:?}"),
                    None => {
                        prop_assert!(r.is_ok(), "step {step}: {r:?}");
                        model.insert(k, Model { data, expiry_ms, deleted: false, maybe_gone: false });
                    }
                }
            }
            Op::Delete { k } => {
                let r = replica.submit(WriteOp::Delete { key: key(k) }).wait();
                match model.get_mut(&k) {
                    None => prop_assert!(matches!(r, Err(EngineError::NotFound)), "step {step}: {r:?}"),
                    Some(m) if m.deleted => prop_assert!(matches!(r, Err(EngineError::Deleted)), "step {step}: {r:?}"),
                    Some(m) if m.maybe_gone => {
                        prop_assert!(matches!(r, Ok(_) | Err(EngineError::NotFound)), "step {step}: {r:?}");
                        if r.is_ok() {
                            m.deleted = true
                        } else {
                            model.remove(&k);
                        }
                    }
                    Some(m) => {
                        prop_assert!(r.is_ok(), "step {step}: {r:?}");
                        m.deleted = true;
                    }
                }
            }
            Op::Ttl { k, ttl } => {
                let expiry_ms = ttl.map_or(0, |t| now + t);
                let r = replica.submit(WriteOp::TtlUpdate { key: key(k), expiry_ms }).wait();
                match model.get_mut(&k) {
                    None => prop_assert!(matches!(r, Err(EngineError::NotFound)), "step {step}: {r:?}"),
                    Some(m) if m.deleted => prop_assert!(matches!(r, Err(EngineError::Deleted)), "step {step}: {r:?}"),
                    Some(m) if expired(m) => prop_assert!(matches!(r, Err(EngineError::Expired) | Err(EngineError::NotFound)), "step {step}: {r:?}"),
                    Some(m) => {
                        prop_assert!(r.is_ok(), "step {step}: {r:?}");
                        m.expiry_ms = expiry_ms;
                    }
                }
            }
            Op::Get { k } => {
                let r = replica.get(&key(k));
                match model.get(&k) {
                    None => prop_assert!(matches!(r, Err(EngineError::NotFound)), "step {step}: {r:?}"),
                    Some(m) if m.deleted => prop_assert!(matches!(r, Err(EngineError::Deleted)), "step {step}: {r:?}"),
                    Some(m) if expired(m) => {
                        let ok = matches!(r, Err(EngineError::Expired)) || (m.maybe_gone && matches!(r, Err(EngineError::NotFound)));
                        prop_assert!(ok, "step {step}: {r:?}");
                        if matches!(r, Err(EngineError::NotFound)) {
                            model.remove(&k);
                        }
                    }
                    Some(m) => {
                        let b = r.map_err(|e| TestCaseError::fail(format!("step {step}: get {k}: {e}")))?;
                        prop_assert_eq!(&b.data[..], &m.data[..], "step {}", step);
                        prop_assert_eq!(b.expiry_ms, m.expiry_ms);
                        prop_assert_eq!(b.size as usize, m.data.len());
                    }
                }
            }
            Op::Compact { crash_at } => {
                for m in model.values_mut() {
                    if expired(m) {
                        m.maybe_gone = true;
                    }
                }
                match crash_at {
                    None => {
                        replica.compact(true).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    }
                    Some(after_commit) => {
                        let phase = if after_commit { CompactionPhase::Commit } else { CompactionPhase::Begin };
                        replica.compact_until(true, Some(phase)).map_err(|e| TestCaseError::fail(e.to_string()))?;
                        replica.close_without_flush();
                        drop(replica);
                        drop(store);
                        store = open();
                        replica = store.replica(7).unwrap();
                    }
                }
            }
            Op::Restart { clean } => {
                if clean {
                    replica.close()
                } else {
                    replica.close_without_flush()
                }
                drop(replica);
                drop(store);
                store = open();
                replica = store.replica(7).unwrap();
            }
            Op::Advance { ms } => clock.advance(ms),
        }
    }
    // Final sweep: every key agrees with the model.
    let now = clock_now(&clock);
    for (k, m) in &model {
        let r = replica.get(&key(*k));
        if m.deleted {
            prop_assert!(matches!(r, Err(EngineError::Deleted)), "final {k}: {r:?}");
        } else if m.expiry_ms != 0 && m.expiry_ms <= now {
            prop_assert!(matches!(r, Err(EngineError::Expired) | Err(EngineError::NotFound)), "final {k}: {r:?}");
        } else {
            prop_assert_eq!(&r.map_err(|e| TestCaseError::fail(e.to_string()))?.data[..], &m.data[..]);
        }
    }
    Ok(())
}

fn clock_now(c: &ManualClock) -> u64 {
    use strata_types::Clock;
    c.now_ms()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]
    #[test]
    fn engine_agrees_with_model(ops in proptest::collection::vec(op(), 1..250)) {
        run(ops)?;
    }
}

/// Found by `engine_agrees_with_model`: a blob whose TTL update (in a later
/// segment than its put) made it expire; compaction rewrote the update's
/// segment first and dropped the update as dead, then a crash cut the pass
/// short before the put's segment: the blob came back, never expiring.
#[test]
fn a_ttl_update_outlives_no_put_it_applies_to() {
    let put = |k, len| Op::Put { k, len, ttl: None };
    let ops = vec![
        put(0, 0),
        put(1, 1254),
        put(2, 1396),
        put(12, 1098),
        put(3, 1304),
        put(20, 126),
        put(4, 1150),
        put(10, 1073),
        Op::Ttl { k: 20, ttl: Some(1) },
        Op::Delete { k: 10 },
        put(0, 0),
        put(0, 0),
        Op::Advance { ms: 1 },
        Op::Compact { crash_at: Some(true) },
    ];
    run(ops).unwrap();
}

/// Three acknowledged puts, then a crash (no index flush). Returns the
/// directory, the clock, the active segment's path and where its records end.
fn three_puts_then_crash() -> (tempfile::TempDir, ManualClock, std::path::PathBuf, u64) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(5);
    let store = Store::open(dir.path(), config(), Arc::new(clock.clone())).unwrap();
    let r = store.create_replica(1).unwrap();
    let puts: Vec<WriteOp> = (0..3u8).map(|k| WriteOp::Put { key: key(k), props: PutProps::default(), data: Bytes::from(payload(k, 500, 0)) }).collect();
    let end = strata_format::headers::SEGMENT_HEADER_BYTES as u64 + puts.iter().map(|p| p.record_len("") as u64).sum::<u64>();
    for p in puts {
        r.submit(p).wait().unwrap();
    }
    r.close_without_flush();
    let seg = std::fs::read_dir(r.dir()).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "log")).max().unwrap();
    (dir, clock, seg, end)
}

/// A crash mid-batch leaves a torn record at the tail: recovery cuts it off
/// and keeps every acknowledged record.
#[test]
fn torn_tail_is_truncated_not_served() {
    let (dir, clock, seg, end) = three_puts_then_crash();
    // Half a record followed by garbage, as a torn write leaves, where the
    // next record would have gone (over the zeros the writer filled ahead).
    let (prefix, _) = strata_format::record::encode_put(99, 5, &key(9), &PutProps::default(), "", &[1; 300]).unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    {
        use std::os::unix::fs::FileExt;
        f.write_all_at(&prefix, end).unwrap();
        f.write_all_at(&[0xAB; 100], end + prefix.len() as u64).unwrap();
    }
    let before = f.metadata().unwrap().len();
    assert!(before >= end + prefix.len() as u64 + 100);
    drop(f);
    let store = Store::open(dir.path(), config(), Arc::new(clock)).unwrap();
    let r = store.replica(1).unwrap();
    for k in 0..3u8 {
        assert_eq!(&r.get(&key(k)).unwrap().data[..], &payload(k, 500, 0)[..]);
    }
    assert!(matches!(r.get(&key(9)), Err(EngineError::NotFound)));
    assert_eq!(r.stats().torn_bytes_truncated.load(std::sync::atomic::Ordering::Relaxed), before - end);
    assert_eq!(std::fs::metadata(&seg).unwrap().len(), end);
    // The log is writable again right after the cut.
    r.submit(WriteOp::Put { key: key(9), props: PutProps::default(), data: Bytes::from_static(b"x") }).wait().unwrap();
}

/// Small writes go into space zero-filled ahead of the log's end; reopening
/// after a crash cuts those zeros quietly (they are not a torn tail), and
/// writes go on where the records end.
#[test]
fn zeros_ahead_are_not_a_torn_tail() {
    let (dir, clock, seg, end) = three_puts_then_crash();
    let bytes = std::fs::read(&seg).unwrap();
    assert!(bytes.len() as u64 > end, "the writer zero-filled ahead");
    assert!(bytes[end as usize..].iter().all(|b| *b == 0));
    for round in 0..2u8 {
        let store = Store::open(dir.path(), config(), Arc::new(clock.clone())).unwrap();
        let r = store.replica(1).unwrap();
        assert_eq!(r.stats().torn_bytes_truncated.load(std::sync::atomic::Ordering::Relaxed), 0);
        for k in 0..3 + round {
            assert_eq!(&r.get(&key(k)).unwrap().data[..], &payload(k, 500, 0)[..]);
        }
        r.submit(WriteOp::Put { key: key(3 + round), props: PutProps::default(), data: Bytes::from(payload(3 + round, 500, 0)) }).wait().unwrap();
        r.close_without_flush();
    }
}

//! Versioned records against a model: random puts and deletes of versions
//! of a few bodies of two kinds (tracts: newest only; chunk versions: every
//! live one), compaction with and without a reclaim horizon, and reopen;
//! after every step the newest, floor and all-versions lookups agree with
//! the model. Compaction may drop what a kind's retention rule lets it
//! drop (superseded tracts, tombstones past the horizon), so the model
//! marks those "may be gone" and accepts either answer for them only.

use bytes::Bytes;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use strata_engine::{EngineConfig, EngineError, Store, WriteOp};
use strata_format::PutProps;
use strata_types::{Key, KeyKind, ManualClock};

#[derive(Debug, Clone)]
enum Op {
    Put { tract: bool, body: u8, v: u64, len: usize },
    Delete { tract: bool, body: u8, v: u64 },
    Compact { horizon: bool },
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (any::<bool>(), 0..3u8, 0..10u64, 0..900usize).prop_map(|(tract, body, v, len)| Op::Put { tract, body, v, len }),
        3 => (any::<bool>(), 0..3u8, 0..10u64).prop_map(|(tract, body, v)| Op::Delete { tract, body, v }),
        1 => any::<bool>().prop_map(|horizon| Op::Compact { horizon }),
        1 => Just(Op::Reopen),
    ]
}

#[derive(Debug, Clone, PartialEq)]
enum Slot {
    Live { data: Vec<u8>, maybe_gone: bool },
    Deleted { lsn: u64, maybe_gone: bool },
}

fn key(tract: bool, body: u8, v: u64) -> Key {
    let kind = if tract { KeyKind::Tract } else { KeyKind::ChunkVersion };
    Key::versioned(kind, &[b'b', body], v).unwrap()
}

fn config() -> EngineConfig {
    EngineConfig { segment_bytes: 8 * 1024, record_bytes_max: 4 * 1024, index_flush_entries: 5, disk_reserve_bytes: 0, ..EngineConfig::default() }
}

type Model = BTreeMap<(bool, u8), BTreeMap<u64, Slot>>;

/// The lookups of one body agree with the model.
fn check_body(r: &strata_engine::Replica, model: &Model, tract: bool, body: u8) -> Result<(), TestCaseError> {
    let empty = BTreeMap::new();
    let slots = model.get(&(tract, body)).unwrap_or(&empty);
    let live = |v: &u64| matches!(slots.get(v), Some(Slot::Live { .. }));
    let may_miss = |v: &u64| matches!(slots.get(v), Some(Slot::Live { maybe_gone: true, .. }));
    let got = r.versions(&key(tract, body, 0)).map_err(|e| TestCaseError::fail(e.to_string()))?;
    for v in &got {
        prop_assert!(live(v), "version {v} of ({tract}, {body}) is listed but not live in the model");
    }
    let records = r.live_versions(&key(tract, body, 0)).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(records.iter().map(|b| b.key.version().unwrap()).collect::<Vec<_>>(), got.clone());
    for b in &records {
        if let Some(Slot::Live { data, .. }) = slots.get(&b.key.version().unwrap()) {
            prop_assert_eq!(&b.data[..], &data[..]);
        }
    }
    for (v, s) in slots {
        if let Slot::Live { maybe_gone: false, .. } = s {
            prop_assert!(got.contains(v), "live version {v} of ({tract}, {body}) is missing: {got:?}");
        }
    }
    // Newest and every floor: a live version of the model with its data,
    // and anything live above it may be gone.
    for at in [None, Some(0), Some(3), Some(5), Some(9)] {
        let r = match at {
            None => r.newest(&key(tract, body, 0)),
            Some(v) => r.floor(&key(tract, body, v)),
        }
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let top = at.unwrap_or(u64::MAX);
        let found = r.as_ref().map(|b| b.key.version().unwrap());
        if let (Some(b), Some(v)) = (&r, found) {
            prop_assert!(v <= top);
            match slots.get(&v) {
                Some(Slot::Live { data, .. }) => prop_assert_eq!(&b.data[..], &data[..], "data of version {}", v),
                other => prop_assert!(false, "floor({at:?}) of ({tract}, {body}) gave {v}, model has {other:?}"),
            }
        }
        let above = found.map_or(0, |f| f + 1);
        for (v, _) in slots.range(above..).take_while(|(v, _)| **v <= top) {
            prop_assert!(!live(v) || may_miss(v), "floor({at:?}) of ({tract}, {body}) gave {found:?} but {v} is live");
        }
    }
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let open = || Store::open(dir.path(), config(), Arc::new(clock.clone())).unwrap();
    let mut store = open();
    let mut r = store.create_replica(1).unwrap();
    let mut model: Model = BTreeMap::new();
    let mut last_lsn = 0;
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Put { tract, body, v, len } => {
                let data: Vec<u8> = (0..len).map(|i| (i as u64 * 13 + step as u64) as u8).collect();
                let res = r.submit(WriteOp::Put { key: key(tract, body, v), props: PutProps::default(), data: Bytes::from(data.clone()) }).wait();
                let slots = model.entry((tract, body)).or_default();
                // A deleted version may be written again; a live one may not.
                let may_be_new = match slots.get(&v) {
                    None | Some(Slot::Deleted { .. }) => true,
                    Some(Slot::Live { maybe_gone, .. }) => *maybe_gone,
                };
                match res {
                    Ok(ack) => {
                        prop_assert!(may_be_new, "step {step}: put of existing version {v} accepted");
                        last_lsn = ack.lsn;
                        slots.insert(v, Slot::Live { data, maybe_gone: false });
                    }
                    Err(EngineError::AlreadyExists) => {
                        prop_assert!(matches!(slots.get(&v), Some(Slot::Live { .. })), "step {step}: put of version {v} refused, model has {:?}", slots.get(&v))
                    }
                    Err(e) => prop_assert!(false, "step {step}: put failed: {e}"),
                }
            }
            Op::Delete { tract, body, v } => {
                let res = r.submit(WriteOp::Delete { key: key(tract, body, v) }).wait();
                let slots = model.entry((tract, body)).or_default();
                match (res, slots.get(&v).cloned()) {
                    (Ok(ack), Some(Slot::Live { .. })) => {
                        last_lsn = ack.lsn;
                        slots.insert(v, Slot::Deleted { lsn: ack.lsn, maybe_gone: false });
                    }
                    (Err(EngineError::NotFound), None) => {}
                    (Err(EngineError::NotFound), Some(Slot::Live { maybe_gone: true, .. } | Slot::Deleted { maybe_gone: true, .. })) => {
                        slots.remove(&v);
                    }
                    (Err(EngineError::Deleted), Some(Slot::Deleted { .. })) => {}
                    // A superseded tract version that had been deleted and
                    // written again: compaction dropped the put and kept the
                    // older tombstone, so it reads as deleted.
                    (Err(EngineError::Deleted), Some(Slot::Live { maybe_gone: true, .. })) => {
                        slots.insert(v, Slot::Deleted { lsn: 0, maybe_gone: true });
                    }
                    (res, slot) => prop_assert!(false, "step {step}: delete of {v} answered {res:?} with the model at {slot:?}"),
                }
            }
            Op::Compact { horizon } => {
                if horizon {
                    r.set_reclaim_horizon(last_lsn);
                }
                r.compact(true).map_err(|e| TestCaseError::fail(e.to_string()))?;
                let h = r.reclaim_horizon();
                for ((tract, _), slots) in model.iter_mut() {
                    let newest_live = slots.iter().rev().find(|(_, s)| matches!(s, Slot::Live { .. })).map(|(v, _)| *v);
                    for (v, s) in slots.iter_mut() {
                        match s {
                            Slot::Live { maybe_gone, .. } if *tract && Some(*v) < newest_live => *maybe_gone = true,
                            Slot::Deleted { lsn, maybe_gone } if *lsn <= h => *maybe_gone = true,
                            _ => {}
                        }
                    }
                }
            }
            Op::Reopen => {
                drop(r);
                store.close();
                drop(store);
                store = open();
                r = store.replica(1).unwrap();
                // The horizon is not persisted: nothing more may go until it is said again.
            }
        }
        for tract in [false, true] {
            for body in 0..3 {
                check_body(&r, &model, tract, body)?;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn versioned_records_agree_with_the_model(ops in proptest::collection::vec(op(), 1..160)) {
        run(ops)?;
    }
}

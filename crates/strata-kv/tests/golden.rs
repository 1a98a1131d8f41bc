//! Golden test vectors: `golden/input.jsonl` built for the store
//! `golden` (3 partitions, 1 replica, 2 chunks) must give exactly the files
//! in `golden/expected/`. They are the contract any other builder (the
//! Spark job of part 2) must match byte for byte. Regenerate them only on a
//! deliberate format change: `STRATA_KV_BLESS=1 cargo test -p strata-kv --test golden`.

use std::collections::BTreeMap;
use std::path::Path;
use strata_kv::input::{InputFormat, read};
use strata_kv::{Duplicates, ReadOnlyStore, Search, StoreDef, build_in_memory};

fn files(d: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(d).unwrap().map(|e| e.unwrap()).map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())).collect()
}

#[test]
fn golden_vectors() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let def = StoreDef { name: "golden".into(), partitions: 3, replication: 1, chunks: 2 };
    let records: Vec<(Vec<u8>, Vec<u8>)> = read(&here.join("input.jsonl"), InputFormat::JsonLines, "key", "value").unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(records.len(), 46);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("built");
    let report = build_in_memory(&def, records, &out, Duplicates::Fail).unwrap();
    assert_eq!(report.records, 46);
    let expected = here.join("expected");
    if std::env::var_os("STRATA_KV_BLESS").is_some() {
        let _ = std::fs::remove_dir_all(&expected);
        std::fs::create_dir_all(&expected).unwrap();
        for (name, bytes) in files(&out) {
            std::fs::write(expected.join(name), bytes).unwrap();
        }
    }
    let (got, want) = (files(&out), files(&expected));
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>(), "different file sets");
    for (name, bytes) in &want {
        assert!(got[name] == *bytes, "{name} differs from the golden vector");
    }
    // And the golden version serves what went in.
    let store = ReadOnlyStore::open(&tmp.path().join("store"), def, 1, Search::Interpolation).unwrap();
    store.swap(store.load(&expected, None).unwrap()).unwrap();
    assert_eq!(store.get(b"member:0007").unwrap().unwrap(), b"profile of member 7");
    assert_eq!(store.get("ünïcödé ✓".as_bytes()).unwrap().unwrap(), b"unicode keys are their UTF-8 bytes");
    assert_eq!(store.get(b"number").unwrap().unwrap(), b"12345");
    assert_eq!(store.get(b"object").unwrap().unwrap(), br#"{"a":[1,2,3],"b":null}"#);
    assert_eq!(store.get(b"").unwrap().unwrap(), b"the empty key");
    assert_eq!(store.get(b"empty").unwrap().unwrap(), b"");
    assert_eq!(store.get(b"member:9999").unwrap(), None);
}

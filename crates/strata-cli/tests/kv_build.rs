//! `strata kv build` as a user runs it: CSV input, a duplicate key that
//! fails the build naming the key, `--last-wins`, and the summary.

use std::process::Command;

fn strata(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_strata")).args(args).output().expect("run strata")
}

#[test]
fn build_from_csv() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in.csv");
    let mut csv = String::from("id,name,score\n");
    for i in 0..1000 {
        csv.push_str(&format!("u{i},\"Name, {i}\",{}\n", i * 3));
    }
    csv.push_str("u7,again,1\n");
    std::fs::write(&input, csv).unwrap();
    let p = |s: &std::path::Path| s.to_str().unwrap().to_string();
    let out = tmp.path().join("v1");
    let r = strata(&["kv", "build", "--store", "people", "--input", &p(&input), "--out", &p(&out), "--key-field", "id", "--value-field", "name"]);
    assert!(!r.status.success());
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("duplicate key \"u7\""), "{err}");
    let out2 = tmp.path().join("v2");
    let r = strata(&[
        "kv",
        "build",
        "--store",
        "people",
        "--input",
        &p(&input),
        "--out",
        &p(&out2),
        "--key-field",
        "id",
        "--value-field",
        "name",
        "--last-wins",
        "--json",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["report"]["records"], 1000);
    assert_eq!(v["report"]["duplicates_dropped"], 1);
    let r = strata(&["kv", "build", "--store", "people", "--input", &p(&input), "--out", &p(&tmp.path().join("v3")), "--key-field", "nope"]);
    assert!(String::from_utf8_lossy(&r.stderr).contains("no column \"nope\""));
    let def = strata_kv::StoreDef { name: "people".into(), partitions: 8, replication: 1, chunks: 2 };
    let store = strata_kv::ReadOnlyStore::open(&tmp.path().join("store"), def, 1, strata_kv::Search::Binary).unwrap();
    store.swap(store.load(&out2, None).unwrap()).unwrap();
    assert_eq!(store.get(b"u7").unwrap().unwrap(), b"again");
    assert_eq!(store.get(b"u999").unwrap().unwrap(), b"Name, 999");
}

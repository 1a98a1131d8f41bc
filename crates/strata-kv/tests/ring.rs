//! Builds for a ring: every record lands in the node folders of its
//! partition's preference list, as replica r under `<p>_<r>_<c>` names;
//! each node serves exactly its share; a folder built for another node or
//! another ring is refused; spilling does not change a byte.

use std::collections::BTreeMap;
use std::path::Path;
use strata_kv::version::Layout;
use strata_kv::{Builder, Duplicates, ReadOnlyStore, Search, StoreDef};
use strata_placement::spock::{Replication, Ring, RingNode};

fn def() -> StoreDef {
    StoreDef { name: "ringed".into(), partitions: 6, replication: 2, chunks: 2 }
}

fn table() -> Vec<Vec<u32>> {
    let nodes: Vec<RingNode> = (0..3).map(|i| RingNode { id: 10 + i, zone: i }).collect();
    Ring::balanced(6, &nodes).unwrap().replica_table(&Replication::Nodes(2)).unwrap()
}

fn records() -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..5000u32).map(|i| (format!("user:{i}").into_bytes(), format!("value {i}").into_bytes())).collect()
}

fn build(out: &Path, memory: usize) -> strata_kv::BuildReport {
    let mut b = Builder::for_ring(&def(), out, Duplicates::Fail, memory, table()).unwrap();
    for chunk in records().chunks(700) {
        b.add_batch(chunk.to_vec()).unwrap();
    }
    b.finish().unwrap()
}

fn tree(d: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(d).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            for (k, v) in tree(&e.path()) {
                out.insert(format!("{}/{k}", e.file_name().to_string_lossy()), v);
            }
        } else {
            out.insert(e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap());
        }
    }
    out
}

#[test]
fn each_node_serves_its_share_of_the_ring() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("built");
    let report = build(&out, 1 << 30);
    assert_eq!((report.records, report.nodes), (5000, 3));
    let table = table();
    let mut stores = BTreeMap::new();
    for node in [10u32, 11, 12] {
        let layout = Layout::for_node(&table, node);
        assert_eq!(layout.buckets.len(), 4, "2 replicas of 6 partitions over 3 nodes");
        let s = ReadOnlyStore::open_with(&tmp.path().join(format!("serve-{node}")), def(), layout, 2, Search::Binary).unwrap();
        s.swap(s.load(&out.join(format!("node-{node}")), None).unwrap()).unwrap();
        stores.insert(node, s);
    }
    for (k, v) in records() {
        let d = <strata_kv::placement::Md5Hash as strata_kv::placement::KeyHash>::digest(&strata_kv::placement::Md5Hash, &k);
        let p = strata_kv::placement::partition_of(&d, 6);
        let owners = &table[p as usize];
        for (node, s) in &stores {
            let snap = s.snapshot().unwrap();
            let got = snap.get(&k, Search::Binary).unwrap();
            if owners.contains(node) {
                assert!(snap.holds(&k));
                assert_eq!(got, Some(v.as_slice()), "node {node} holds partition {p}");
            } else {
                assert!(!snap.holds(&k), "node {node} does not hold partition {p}");
                assert_eq!(got, None);
            }
        }
    }
    // Node 10's folder is refused by node 11, and by a store on another ring.
    let e = stores[&11].load(&out.join("node-10"), None).unwrap_err();
    assert!(e.to_string().contains("built for node 10"), "{e}");
    let mut other = Layout::for_node(&table, 10);
    other.ring = Some(other.ring.unwrap() ^ 1);
    let s = ReadOnlyStore::open_with(&tmp.path().join("other"), def(), other, 2, Search::Binary).unwrap();
    assert!(s.load(&out.join("node-10"), None).unwrap_err().to_string().contains("a different ring"));
    // A folder missing one bucket's files (metadata and all) is refused.
    let mut fewer = Layout::for_node(&table, 10);
    let extra = (0..6).map(|p| (p, 0)).find(|b| !fewer.buckets.contains(b)).unwrap();
    fewer.buckets.insert(extra);
    let s = ReadOnlyStore::open_with(&tmp.path().join("fewer"), def(), fewer, 2, Search::Binary).unwrap();
    assert!(s.load(&out.join("node-10"), None).unwrap_err().to_string().contains("missing"));
}

#[test]
fn ring_builds_spill_to_the_same_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("mem"), tmp.path().join("ext"));
    build(&a, 1 << 30);
    let r = build(&b, 64 << 10);
    assert!(r.runs > 3, "{} runs", r.runs);
    assert_eq!(tree(&a), tree(&b));
    // And a plain builder refuses a store with replicas.
    assert!(Builder::new(&def(), &tmp.path().join("x"), Duplicates::Fail, 1 << 20).is_err());
}

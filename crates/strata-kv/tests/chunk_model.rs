//! The chunk format against a HashMap model: every key written is found
//! with its value, keys never written are absent, in both search modes,
//! including keys whose 8-byte digest prefixes collide (forced with a weak
//! hash that keeps only a few distinct prefixes).

use proptest::prelude::*;
use std::collections::HashMap;
use strata_kv::Search;
use strata_kv::format::{ChunkReader, ChunkWriter, FormatError};
use strata_kv::placement::{KeyHash, Md5Hash, prefix};

/// MD5 with the first 8 bytes squeezed to `spread` distinct values.
struct Weak(u8);

impl KeyHash for Weak {
    fn digest(&self, key: &[u8]) -> [u8; 16] {
        let mut d = Md5Hash.digest(key);
        let b = d[0] % self.0.max(1);
        d[..8].copy_from_slice(&[b, 0, 0, 0, 0, 0, 0, 0]);
        d
    }
}

fn build(dir: &std::path::Path, hash: &dyn KeyHash, model: &HashMap<Vec<u8>, Vec<u8>>) -> ChunkReader {
    let mut tuples: Vec<(u64, &Vec<u8>, &Vec<u8>)> = model.iter().map(|(k, v)| (prefix(&hash.digest(k)), k, v)).collect();
    tuples.sort();
    let mut w = ChunkWriter::create(dir, "0_0_0").unwrap();
    for (p, k, v) in &tuples {
        w.push(*p, k, v).unwrap();
    }
    let stats = w.finish().unwrap();
    assert_eq!(stats.records, model.len() as u64);
    let r = ChunkReader::open(&dir.join("0_0_0.index"), &dir.join("0_0_0.data")).unwrap();
    assert_eq!(r.check().unwrap(), model.len() as u64);
    r
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn chunk_agrees_with_a_hashmap(
        entries in proptest::collection::hash_map(proptest::collection::vec(any::<u8>(), 0..24), proptest::collection::vec(any::<u8>(), 0..64), 0..300),
        absent in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..50),
        spread in prop_oneof![Just(0u8), Just(3u8), Just(255u8)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let weak = Weak(spread);
        let hash: &dyn KeyHash = if spread == 0 { &Md5Hash } else { &weak };
        let r = build(dir.path(), hash, &entries);
        for search in [Search::Binary, Search::Interpolation] {
            for (k, v) in &entries {
                let got = r.get(prefix(&hash.digest(k)), k, search).unwrap();
                prop_assert_eq!(got, Some(&v[..]), "key {:?}", k);
            }
            for k in absent.iter().filter(|k| !entries.contains_key(*k)) {
                prop_assert_eq!(r.get(prefix(&hash.digest(k)), k, search).unwrap(), None);
            }
        }
    }
}

#[test]
fn out_of_order_and_duplicate_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = ChunkWriter::create(dir.path(), "a").unwrap();
    w.push(5, b"k", b"v").unwrap();
    assert!(matches!(w.push(5, b"k", b"w"), Err(FormatError::DuplicateKey(k)) if k == b"k"));
    assert!(matches!(w.push(5, b"a", b"w"), Err(FormatError::Order(_))));
    assert!(matches!(w.push(4, b"z", b"w"), Err(FormatError::Order(_))));
}

#[test]
fn damaged_files_are_refused_or_caught() {
    let dir = tempfile::tempdir().unwrap();
    let model: HashMap<Vec<u8>, Vec<u8>> = (0..100u32).map(|i| (i.to_le_bytes().to_vec(), vec![i as u8; 10])).collect();
    drop(build(dir.path(), &Md5Hash, &model));
    let (ix, dx) = (dir.path().join("0_0_0.index"), dir.path().join("0_0_0.data"));
    let index = std::fs::read(&ix).unwrap();
    let data = std::fs::read(&dx).unwrap();
    // Truncated index: its size no longer matches its entry count.
    std::fs::write(&ix, &index[..index.len() - 3]).unwrap();
    assert!(matches!(ChunkReader::open(&ix, &dx), Err(FormatError::Corrupt { .. })));
    // Bad magic.
    let mut bad = index.clone();
    bad[0] ^= 1;
    std::fs::write(&ix, &bad).unwrap();
    assert!(matches!(ChunkReader::open(&ix, &dx), Err(FormatError::Corrupt { .. })));
    // Truncated data: the structure check catches it.
    std::fs::write(&ix, &index).unwrap();
    std::fs::write(&dx, &data[..data.len() - 5]).unwrap();
    let r = ChunkReader::open(&ix, &dx).unwrap();
    assert!(r.check().is_err());
}

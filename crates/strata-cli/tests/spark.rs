//! The Spark builder (`tools/spark/build_store.py`, run by `spark-submit` in
//! local mode) writes the same bytes as the Rust builder: the golden vectors
//! in single-node mode, and every node folder of a zone-aware ring build of
//! a generated CSV full of quotes, commas, newlines, empty fields and
//! non-ASCII text, and of a Snappy Parquet file with integer keys. A
//! duplicate key fails the Spark build, naming it.
//!
//! Needs PySpark (pinned in `tools/spark/requirements.txt`) in the virtual
//! environment `scripts/test.sh` makes (`target/pyenv`, or `STRATA_PYENV`)
//! and Java 17.

mod common;

use common::{same, spark, strata, workspace};
use std::path::Path;

#[test]
fn spark_builds_the_golden_vectors() {
    let tmp = tempfile::tempdir().unwrap();
    let golden = workspace().join("crates/strata-kv/tests/golden");
    let out = tmp.path().join("out");
    let input = golden.join("input.jsonl");
    let (ok, log) = spark(&["--store", "golden", "--input", input.to_str().unwrap(), "--out", out.to_str().unwrap(), "--partitions", "3", "--chunks", "2"]);
    assert!(ok, "{log}");
    same(&out, &golden.join("expected"));
}

/// A deterministic CSV with everything CSV quoting has to get right.
fn generated_csv(path: &Path, rows: u32, duplicate: bool) {
    let alphabet: Vec<char> = "ab ,\"\nxé✓\r'".chars().collect();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    let mut text = String::from("id,payload\n");
    for i in 0..rows {
        let len = (next() % 40) as usize;
        let v: String = (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
        text.push_str(&format!("{},{}\n", quote(&format!("user-{i}")), quote(&v)));
    }
    text.push_str(",empty key\nempty value,\n");
    if duplicate {
        text.push_str("user-7,again\n");
    }
    std::fs::write(path, text).unwrap();
}

/// `rows` rows of (INT64 id, UTF-8 payload) in row groups of 3,000, Snappy.
fn write_parquet(path: &Path, rows: i64) {
    use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
    use std::sync::Arc;
    let schema = Arc::new(parquet::schema::parser::parse_message_type("message m { required int64 id; required binary payload (UTF8); }").unwrap());
    let props = Arc::new(parquet::file::properties::WriterProperties::builder().set_compression(parquet::basic::Compression::SNAPPY).build());
    let mut w = parquet::file::writer::SerializedFileWriter::new(std::fs::File::create(path).unwrap(), schema, props).unwrap();
    let ids: Vec<i64> = (0..rows).map(|i| i * 7919 - 50_000).collect();
    for group in ids.chunks(3000) {
        let mut rg = w.next_row_group().unwrap();
        let mut col = rg.next_column().unwrap().unwrap();
        col.typed::<Int64Type>().write_batch(group, None, None).unwrap();
        col.close().unwrap();
        let mut col = rg.next_column().unwrap().unwrap();
        let values: Vec<ByteArray> = group.iter().map(|i| ByteArray::from(format!("payload ✓ {i}").as_str())).collect();
        col.typed::<ByteArrayType>().write_batch(&values, None, None).unwrap();
        col.close().unwrap();
        rg.close().unwrap();
    }
    w.close().unwrap();
}

#[test]
fn spark_and_rust_ring_builds_are_identical() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    generated_csv(&tmp.path().join("in.csv"), 30_000, false);
    strata(&[
        "kv",
        "ring",
        "plan",
        "--store",
        "gen",
        "--nodes",
        "1:0,2:1,3:2,4:0,5:1",
        "--partitions",
        "10",
        "--chunks",
        "3",
        "--zone-replicas",
        "0=1,1=1,2=1",
        "--out",
        &p("ring.json"),
    ]);
    strata(&[
        "kv",
        "build",
        "--store",
        "gen",
        "--ring",
        &p("ring.json"),
        "--input",
        &p("in.csv"),
        "--key-field",
        "id",
        "--value-field",
        "payload",
        "--out",
        &p("rust"),
    ]);
    let (ok, log) =
        spark(&["--store", "gen", "--ring", &p("ring.json"), "--input", &p("in.csv"), "--key-field", "id", "--value-field", "payload", "--out", &p("spark")]);
    assert!(ok, "{log}");
    let nodes: Vec<String> = std::fs::read_dir(p("rust")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(nodes.len(), 5, "every node has a share: {nodes:?}");
    same(&tmp.path().join("rust"), &tmp.path().join("spark"));

    // Parquet input (INT64 keys, Snappy, several row groups): the same bytes too.
    write_parquet(&tmp.path().join("in.parquet"), 20_000);
    strata(&[
        "kv",
        "build",
        "--store",
        "gen",
        "--ring",
        &p("ring.json"),
        "--input",
        &p("in.parquet"),
        "--key-field",
        "id",
        "--value-field",
        "payload",
        "--out",
        &p("rust-pq"),
    ]);
    let (ok, log) = spark(&[
        "--store",
        "gen",
        "--ring",
        &p("ring.json"),
        "--input",
        &p("in.parquet"),
        "--key-field",
        "id",
        "--value-field",
        "payload",
        "--out",
        &p("spark-pq"),
    ]);
    assert!(ok, "{log}");
    same(&tmp.path().join("rust-pq"), &tmp.path().join("spark-pq"));

    // A duplicate key fails the Spark build, naming it.
    generated_csv(&tmp.path().join("dup.csv"), 100, true);
    let (ok, log) =
        spark(&["--store", "gen", "--ring", &p("ring.json"), "--input", &p("dup.csv"), "--key-field", "id", "--value-field", "payload", "--out", &p("dup")]);
    assert!(!ok);
    assert!(log.contains("duplicate key b'user-7'"), "{}", &log[log.len().saturating_sub(3000)..]);
}

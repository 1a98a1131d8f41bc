//! Parquet input: the golden records written as Parquet (Snappy, several
//! row groups, a nullable value column) build exactly the golden vectors,
//! and bad Parquet input is refused with a message naming the problem.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use strata_kv::input::{Extent, InputError, InputFormat, extent, read};
use strata_kv::{Duplicates, StoreDef, build_in_memory};

fn files(d: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(d).unwrap().map(|e| e.unwrap()).map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())).collect()
}

/// Writes `(key, value)` rows in row groups of `group` rows; `None` values are nulls.
fn write(path: &Path, schema: &str, rows: &[(Vec<u8>, Option<Vec<u8>>)], group: usize) {
    let schema = Arc::new(parse_message_type(schema).unwrap());
    let props = Arc::new(WriterProperties::builder().set_compression(Compression::SNAPPY).build());
    let mut w = SerializedFileWriter::new(std::fs::File::create(path).unwrap(), schema, props).unwrap();
    for chunk in rows.chunks(group) {
        let mut rg = w.next_row_group().unwrap();
        let mut i = 0;
        while let Some(mut col) = rg.next_column().unwrap() {
            if i == 0 {
                let keys: Vec<ByteArray> = chunk.iter().map(|(k, _)| ByteArray::from(k.clone())).collect();
                col.typed::<ByteArrayType>().write_batch(&keys, None, None).unwrap();
            } else {
                let defs: Vec<i16> = chunk.iter().map(|(_, v)| i16::from(v.is_some())).collect();
                let values: Vec<ByteArray> = chunk.iter().filter_map(|(_, v)| v.clone().map(ByteArray::from)).collect();
                col.typed::<ByteArrayType>().write_batch(&values, Some(&defs), None).unwrap();
            }
            col.close().unwrap();
            i += 1;
        }
        rg.close().unwrap();
    }
    w.close().unwrap();
}

#[test]
fn parquet_input_builds_the_golden_vectors() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let records: Vec<(Vec<u8>, Vec<u8>)> = read(&here.join("input.jsonl"), InputFormat::JsonLines, "key", "value").unwrap().map(|r| r.unwrap()).collect();
    let tmp = tempfile::tempdir().unwrap();
    let pq = tmp.path().join("input.parquet");
    let rows: Vec<_> = records.iter().map(|(k, v)| (k.clone(), Some(v.clone()))).collect();
    write(&pq, "message m { required binary key; optional binary value (UTF8); }", &rows, 7);
    assert_eq!(InputFormat::pick(None, &pq).unwrap(), InputFormat::Parquet);
    assert_eq!(extent(&pq, InputFormat::Parquet).unwrap(), Extent::Rows(46));
    let got: Vec<_> = read(&pq, InputFormat::Parquet, "key", "value").unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got, records, "Parquet yields the rows in file order");
    let def = StoreDef { name: "golden".into(), partitions: 3, replication: 1, chunks: 2 };
    let out = tmp.path().join("built");
    build_in_memory(&def, got, &out, Duplicates::Fail).unwrap();
    assert_eq!(files(&out), files(&here.join("expected")), "Parquet input builds the golden vectors byte for byte");
}

#[test]
fn integer_columns_are_their_decimal_text() {
    let tmp = tempfile::tempdir().unwrap();
    let pq = tmp.path().join("ints.parquet");
    let schema = Arc::new(parse_message_type("message m { required int64 id; required binary v; }").unwrap());
    let mut w = SerializedFileWriter::new(std::fs::File::create(&pq).unwrap(), schema, Arc::new(WriterProperties::builder().build())).unwrap();
    let mut rg = w.next_row_group().unwrap();
    let mut col = rg.next_column().unwrap().unwrap();
    col.typed::<Int64Type>().write_batch(&[7, -12, 9_000_000_000], None, None).unwrap();
    col.close().unwrap();
    let mut col = rg.next_column().unwrap().unwrap();
    col.typed::<ByteArrayType>().write_batch(&[ByteArray::from("a"), ByteArray::from("b"), ByteArray::from("c")], None, None).unwrap();
    col.close().unwrap();
    rg.close().unwrap();
    w.close().unwrap();
    let got: Vec<_> = read(&pq, InputFormat::Parquet, "id", "v").unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(got, vec![(b"7".to_vec(), b"a".to_vec()), (b"-12".to_vec(), b"b".to_vec()), (b"9000000000".to_vec(), b"c".to_vec())]);
}

#[test]
fn bad_parquet_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let pq = tmp.path().join("nulls.parquet");
    let rows: Vec<_> = (0..20).map(|i| (format!("k{i}").into_bytes(), if i == 13 { None } else { Some(b"v".to_vec()) })).collect();
    write(&pq, "message m { required binary key; optional binary value; }", &rows, 8);
    let mut it = read(&pq, InputFormat::Parquet, "key", "value").unwrap();
    let results: Vec<_> = it.by_ref().collect();
    let err = results.iter().find_map(|r| r.as_ref().err()).expect("a null value is an error");
    let msg = err.to_string();
    assert!(msg.contains("nulls.parquet:14") && msg.contains("null in value column"), "{msg}");
    assert!(it.next().is_none(), "nothing after the error");

    let e = read(&pq, InputFormat::Parquet, "key", "nope").err().expect("unknown column");
    assert!(matches!(e, InputError::Unsupported(ref m) if m.contains("no column \"nope\"")), "{e}");

    let junk = tmp.path().join("junk.parquet");
    std::fs::write(&junk, b"this is not a parquet file at all").unwrap();
    let e = read(&junk, InputFormat::Parquet, "key", "value").err().expect("not Parquet");
    assert!(e.to_string().contains("not Parquet"), "{e}");

    let mut truncated = std::fs::read(&pq).unwrap();
    truncated.truncate(truncated.len() / 2);
    std::fs::write(&junk, &truncated).unwrap();
    assert!(read(&junk, InputFormat::Parquet, "key", "value").is_err(), "a truncated file is refused");
}

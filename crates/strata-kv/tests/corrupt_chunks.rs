//! Chunk files with counts and offsets that point anywhere (found by the
//! fuzz target `kv_chunk`): every reader answers an error, never panics or
//! wraps around.

use strata_kv::{ChunkReader, ChunkWriter, Search};

fn chunk(dir: &std::path::Path) -> (Vec<u8>, Vec<u8>) {
    let mut w = ChunkWriter::create(dir, "c").unwrap();
    w.push(1, b"a", b"one").unwrap();
    w.push(2, b"b", b"two").unwrap();
    w.finish().unwrap();
    (std::fs::read(dir.join("c.index")).unwrap(), std::fs::read(dir.join("c.data")).unwrap())
}

fn open(dir: &std::path::Path, index: &[u8], data: &[u8]) -> Result<ChunkReader, strata_kv::FormatError> {
    std::fs::write(dir.join("x.index"), index).unwrap();
    std::fs::write(dir.join("x.data"), data).unwrap();
    ChunkReader::open(&dir.join("x.index"), &dir.join("x.data"))
}

#[test]
fn a_huge_entry_count_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (mut index, data) = chunk(dir.path());
    index[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(open(dir.path(), &index, &data).is_err());
}

#[test]
fn an_offset_past_the_data_is_an_error_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let (mut index, data) = chunk(dir.path());
    // Entry 0's offset (bytes 8..16 of the entry after the 24-byte header).
    index[24 + 8..24 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    let r = open(dir.path(), &index, &data).unwrap();
    assert!(r.stats().is_err());
    assert!(r.check().is_err());
    for s in [Search::Binary, Search::Interpolation] {
        assert!(r.get(1, b"a", s).is_err());
    }
}

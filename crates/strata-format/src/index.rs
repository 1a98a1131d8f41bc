//! Persisted index files (format version 2; version 1 is still read): an
//! immutable sorted run of index entries for one byte range of one log
//! segment, followed by its Bloom filter.
//!
//! ```text
//! header (64 bytes)
//!  0  8  magic "STRAIDX\0"
//!  8  2  version (2)
//! 10  2  key slot K: bytes reserved per key (longest key in the file)
//! 12  2  entry size E = 1 + K + 33
//! 14  2  reserved (0)
//! 16  8  segment id
//! 24  4  segment generation
//! 28  4  reserved (0)
//! 32  8  log start offset covered (inclusive)
//! 40  8  log end offset covered (exclusive)
//! 48  4  entry count N
//! 52  4  bloom words W
//! 56  4  CRC32C of the body (entries and bloom)
//! 60  4  CRC32C of header bytes 0..60
//! body: N entries of E bytes sorted by (key, kind), then W little-endian u64 bloom words.
//! entry: key_len u8 | key (K bytes, zero padded) | kind u8 | expiry_ms u64 |
//!        lsn u64 | record_offset u64 | record_len u32 | data_offset u32
//! ```
//!
//! Version 2 has version 1's layout. What is new: entries may have
//! versioned keys (record version 3), and the Bloom filter holds, besides
//! every key, the version group of every versioned key (its bytes without
//! the version), so a lookup by group ("the newest version of this key")
//! skips files that hold none of its versions. Version 1 files hold blob
//! keys only; a versioned key in one is refused as corrupt.

use crate::record::RecordKind;
use crate::{FormatError, Reader, check_crc};
use strata_types::{Key, MAX_KEY_LEN};

/// Magic of an index file.
pub const INDEX_MAGIC: &[u8; 8] = b"STRAIDX\0";
/// Format version written by this code.
pub const INDEX_VERSION: u16 = 2;
/// Size of the index file header.
pub const INDEX_HEADER_BYTES: usize = 64;
const VALUE_BYTES: usize = 33;

/// Entry kinds are record kinds: an index entry points at one record.
pub type EntryKind = RecordKind;

/// One index entry: where a record of a key is, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// The key.
    pub key: Key,
    /// The record kind.
    pub kind: EntryKind,
    /// Expiry for puts and TTL updates (0 = never).
    pub expiry_ms: u64,
    /// Record sequence number.
    pub lsn: u64,
    /// Record start within the segment file.
    pub record_offset: u64,
    /// Record length, CRC included.
    pub record_len: u32,
    /// Data start relative to the record (puts).
    pub data_offset: u32,
}

/// The decoded header of an index file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexFileHeader {
    /// Format version of the file (1 or 2).
    pub version: u16,
    /// Bytes per key slot.
    pub key_slot: u16,
    /// Bytes per entry.
    pub entry_size: u16,
    /// Log segment covered.
    pub segment_id: u64,
    /// Generation of that segment.
    pub generation: u32,
    /// First log offset covered.
    pub log_start: u64,
    /// One past the last log offset covered.
    pub log_end: u64,
    /// Number of entries.
    pub entry_count: u32,
    /// Number of bloom words.
    pub bloom_words: u32,
}

impl IndexFileHeader {
    /// Byte offset of entry `i`.
    pub fn entry_pos(&self, i: usize) -> usize {
        INDEX_HEADER_BYTES + i * self.entry_size as usize
    }
    /// Byte offset of the bloom words.
    pub fn bloom_pos(&self) -> usize {
        self.entry_pos(self.entry_count as usize)
    }
    /// Total file length.
    pub fn file_len(&self) -> usize {
        self.bloom_pos() + self.bloom_words as usize * 8
    }
}

/// Serializes a sorted run of entries with its bloom filter into a complete file image.
pub fn encode_file(segment_id: u64, generation: u32, log_start: u64, log_end: u64, entries: &[IndexEntry]) -> Vec<u8> {
    debug_assert!(entries.windows(2).all(|w| (&w[0].key, w[0].kind) < (&w[1].key, w[1].kind)), "entries must be sorted and unique");
    let key_slot = entries.iter().map(|e| e.key.as_bytes().len()).max().unwrap_or(1);
    let entry_size = 1 + key_slot + VALUE_BYTES;
    let groups = entries.iter().filter(|e| e.key.kind().is_versioned()).count();
    let mut bloom = crate::Bloom::with_capacity(entries.len() + groups);
    let mut body = Vec::with_capacity(entries.len() * entry_size + entries.len() * 2);
    for e in entries {
        let k = e.key.as_bytes();
        bloom.insert(k);
        if let Some(group) = e.key.version_group() {
            bloom.insert(group);
        }
        body.push(k.len() as u8);
        body.extend_from_slice(k);
        body.resize(body.len() + key_slot - k.len(), 0);
        body.push(e.kind as u8);
        body.extend_from_slice(&e.expiry_ms.to_le_bytes());
        body.extend_from_slice(&e.lsn.to_le_bytes());
        body.extend_from_slice(&e.record_offset.to_le_bytes());
        body.extend_from_slice(&e.record_len.to_le_bytes());
        body.extend_from_slice(&e.data_offset.to_le_bytes());
    }
    for w in bloom.words() {
        body.extend_from_slice(&w.to_le_bytes());
    }
    let mut h = Vec::with_capacity(INDEX_HEADER_BYTES + body.len());
    h.extend_from_slice(INDEX_MAGIC);
    h.extend_from_slice(&INDEX_VERSION.to_le_bytes());
    h.extend_from_slice(&(key_slot as u16).to_le_bytes());
    h.extend_from_slice(&(entry_size as u16).to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend_from_slice(&segment_id.to_le_bytes());
    h.extend_from_slice(&generation.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&log_start.to_le_bytes());
    h.extend_from_slice(&log_end.to_le_bytes());
    h.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    h.extend_from_slice(&(bloom.words().len() as u32).to_le_bytes());
    h.extend_from_slice(&crate::crc::crc32c(&body).to_le_bytes());
    let hcrc = crate::crc::crc32c(&h);
    h.extend_from_slice(&hcrc.to_le_bytes());
    h.extend_from_slice(&body);
    h
}

/// Validates a whole index file image (both CRCs) and returns its header.
pub fn decode_header(file: &[u8]) -> Result<IndexFileHeader, FormatError> {
    let mut r = Reader::new(file, "index header");
    let head = r.bytes(INDEX_HEADER_BYTES)?;
    check_crc("index header", &head[..60], &head[60..64])?;
    let mut r = Reader::new(head, "index header");
    if r.bytes(8)? != INDEX_MAGIC {
        return Err(FormatError::BadMagic { what: "index file" });
    }
    let version = r.u16()?;
    if !(1..=INDEX_VERSION).contains(&version) {
        return Err(FormatError::Version { what: "index file", version: version.into() });
    }
    let key_slot = r.u16()?;
    let entry_size = r.u16()?;
    r.u16()?;
    let segment_id = r.u64()?;
    let generation = r.u32()?;
    r.u32()?;
    let log_start = r.u64()?;
    let log_end = r.u64()?;
    let entry_count = r.u32()?;
    let bloom_words = r.u32()?;
    let body_crc = r.bytes(4)?;
    if key_slot == 0 || key_slot as usize > MAX_KEY_LEN || entry_size as usize != 1 + key_slot as usize + VALUE_BYTES || log_end < log_start {
        return Err(FormatError::Invalid { what: "index header", detail: "inconsistent sizes".into() });
    }
    let h = IndexFileHeader { version, key_slot, entry_size, segment_id, generation, log_start, log_end, entry_count, bloom_words };
    if file.len() != h.file_len() {
        return Err(FormatError::Truncated { what: "index file", need: h.file_len(), have: file.len() });
    }
    check_crc("index body", &file[INDEX_HEADER_BYTES..], body_crc)?;
    Ok(h)
}

/// The key bytes of entry `i` (no allocation), for binary search.
pub fn entry_key<'a>(file: &'a [u8], h: &IndexFileHeader, i: usize) -> &'a [u8] {
    let p = h.entry_pos(i);
    let len = file[p] as usize;
    &file[p + 1..p + 1 + len.min(h.key_slot as usize)]
}

/// Decodes entry `i`; the file must already have passed [`decode_header`].
pub fn decode_entry(file: &[u8], h: &IndexFileHeader, i: usize) -> Result<IndexEntry, FormatError> {
    let p = h.entry_pos(i);
    let mut r = Reader::new(&file[p..p + h.entry_size as usize], "index entry");
    let len = r.u8()? as usize;
    let slot = r.bytes(h.key_slot as usize)?;
    let key = slot
        .get(..len)
        .and_then(Key::from_encoded)
        .filter(|k| h.version >= 2 || !k.kind().is_versioned())
        .ok_or(FormatError::Invalid { what: "index entry key", detail: format!("entry {i}") })?;
    let kind = RecordKind::from_u8(r.u8()?).ok_or(FormatError::Invalid { what: "index entry kind", detail: format!("entry {i}") })?;
    Ok(IndexEntry { key, kind, expiry_ms: r.u64()?, lsn: r.u64()?, record_offset: r.u64()?, record_len: r.u32()?, data_offset: r.u32()? })
}

/// The stored bloom filter.
pub fn decode_bloom(file: &[u8], h: &IndexFileHeader) -> Result<crate::Bloom, FormatError> {
    let words = file[h.bloom_pos()..h.file_len()].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
    crate::Bloom::from_words(words).ok_or(FormatError::Invalid { what: "bloom filter", detail: "not whole blocks".into() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_types::KeyKind;

    #[test]
    fn file_round_trip_and_corruption() {
        let mut entries: Vec<IndexEntry> = (0..100u32)
            .map(|i| IndexEntry {
                key: Key::new(KeyKind::Blob, &i.to_be_bytes()[..(1 + i as usize % 4)]).unwrap(),
                kind: RecordKind::Put,
                expiry_ms: i as u64,
                lsn: i as u64,
                record_offset: 64 + i as u64,
                record_len: 10,
                data_offset: 3,
            })
            .collect();
        entries.sort_by(|a, b| (&a.key, a.kind).cmp(&(&b.key, b.kind)));
        entries.dedup_by(|a, b| a.key == b.key);
        let file = encode_file(3, 1, 64, 1000, &entries);
        let h = decode_header(&file).unwrap();
        assert_eq!((h.segment_id, h.generation, h.log_start, h.log_end), (3, 1, 64, 1000));
        let bloom = decode_bloom(&file, &h).unwrap();
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(&decode_entry(&file, &h, i).unwrap(), e);
            assert_eq!(entry_key(&file, &h, i), e.key.as_bytes());
            assert!(bloom.may_contain(e.key.as_bytes()));
        }
        let mut bad = file.clone();
        bad[INDEX_HEADER_BYTES + 5] ^= 1;
        assert!(matches!(decode_header(&bad), Err(FormatError::Checksum { .. })));
        assert!(decode_header(&file[..file.len() - 1]).is_err());
    }

    /// `file` with its version field set to `version` and its header CRC
    /// recomputed.
    fn with_version(file: &[u8], version: u16) -> Vec<u8> {
        let mut f = file.to_vec();
        f[8..10].copy_from_slice(&version.to_le_bytes());
        let crc = crate::crc::crc32c(&f[..60]);
        f[60..64].copy_from_slice(&crc.to_le_bytes());
        f
    }

    #[test]
    fn version_groups_are_in_the_bloom_and_version_1_holds_blobs_only() {
        let e = |key: Key, lsn| IndexEntry { key, kind: RecordKind::Put, expiry_ms: 0, lsn, record_offset: 64, record_len: 10, data_offset: 3 };
        let v = |n| Key::versioned(KeyKind::ChunkVersion, b"chunk-7", n).unwrap();
        let entries = vec![e(Key::new(KeyKind::Blob, b"blob").unwrap(), 1), e(v(1), 2), e(v(5), 3)];
        let file = encode_file(1, 0, 64, 100, &entries);
        let h = decode_header(&file).unwrap();
        assert_eq!(h.version, 2);
        let bloom = decode_bloom(&file, &h).unwrap();
        assert!(bloom.may_contain(v(1).version_group().unwrap()));
        assert!((0..3).all(|i| decode_entry(&file, &h, i).is_ok()));
        // The same entries in a version 1 file: the blob reads, the
        // versioned keys are refused.
        let old = with_version(&file, 1);
        let h1 = decode_header(&old).unwrap();
        assert_eq!(h1.version, 1);
        assert!(decode_entry(&old, &h1, 0).is_ok());
        assert!(decode_entry(&old, &h1, 1).is_err());
        assert!(matches!(decode_header(&with_version(&file, 3)), Err(FormatError::Version { .. })));
    }
}

//! The chunk list stored as the data of a composite (metadata) blob
//! (Ambry Fig. 4):
//!
//! ```text
//!  0  8  magic "STRACHL\0"
//!  8  2  version (1 or 2)
//! 10  2  reserved (0)
//! 12  4  chunk count N
//! 16  8  chunk size in bytes (every chunk but the last has this size)
//! 24  8  total blob size in bytes
//! 32  version 1: N × 34: chunk blob id (26 bytes, binary form) | chunk size u64
//!     version 2: N × (id length u8 | chunk blob id (26 or 30 bytes) | chunk size u64)
//! end 4  CRC32C of every preceding byte
//! ```
//!
//! Version 1 is written when every chunk id has the version 1 form (the
//! default container), so lists stay as they were; version 2 when any
//! chunk belongs to another container.

use crate::{FormatError, Reader, check_crc};
use strata_types::BlobId;

const MAGIC: &[u8; 8] = b"STRACHL\0";
/// Format version of a list of default-container chunks.
pub const CHUNK_LIST_VERSION: u16 = 1;
/// Format version of a list with chunks of other containers.
pub const CHUNK_LIST_VERSION_CONTAINERS: u16 = 2;

/// The ordered chunks of a large blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkList {
    /// Nominal chunk size.
    pub chunk_size: u64,
    /// Sum of the chunk sizes.
    pub total_size: u64,
    /// Chunks in order with their sizes.
    pub chunks: Vec<(BlobId, u64)>,
}

impl ChunkList {
    /// Encodes the list.
    pub fn encode(&self) -> Vec<u8> {
        let v1 = self.chunks.iter().all(|(id, _)| id.to_bytes().len() == BlobId::BYTES);
        let mut b = Vec::with_capacity(36 + self.chunks.len() * (BlobId::BYTES_MAX + 9));
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&if v1 { CHUNK_LIST_VERSION } else { CHUNK_LIST_VERSION_CONTAINERS }.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.chunk_size.to_le_bytes());
        b.extend_from_slice(&self.total_size.to_le_bytes());
        for (id, size) in &self.chunks {
            let id = id.to_bytes();
            if !v1 {
                b.push(id.len() as u8);
            }
            b.extend_from_slice(&id);
            b.extend_from_slice(&size.to_le_bytes());
        }
        let crc = crate::crc::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes and checks the list, including that the sizes add up.
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        if buf.len() < 36 {
            return Err(FormatError::Truncated { what: "chunk list", need: 36, have: buf.len() });
        }
        check_crc("chunk list", &buf[..buf.len() - 4], &buf[buf.len() - 4..])?;
        let mut r = Reader::new(&buf[..buf.len() - 4], "chunk list");
        if r.bytes(8)? != MAGIC {
            return Err(FormatError::BadMagic { what: "chunk list" });
        }
        let v = r.u16()?;
        if v != CHUNK_LIST_VERSION && v != CHUNK_LIST_VERSION_CONTAINERS {
            return Err(FormatError::Version { what: "chunk list", version: v.into() });
        }
        r.u16()?;
        let n = r.u32()? as usize;
        let chunk_size = r.u64()?;
        let total_size = r.u64()?;
        let fits = |entry_min: usize| n.checked_mul(entry_min).and_then(|e| e.checked_add(36)).is_some_and(|need| need <= buf.len());
        let exact = v == CHUNK_LIST_VERSION && n.checked_mul(34).and_then(|e| e.checked_add(36)) == Some(buf.len());
        if !(exact || v == CHUNK_LIST_VERSION_CONTAINERS && fits(BlobId::BYTES + 9)) {
            return Err(FormatError::Invalid { what: "chunk list", detail: format!("{n} chunks do not fill {} bytes", buf.len()) });
        }
        let mut chunks = Vec::with_capacity(n);
        for _ in 0..n {
            let len = if v == CHUNK_LIST_VERSION { BlobId::BYTES } else { usize::from(r.u8()?) };
            let id = BlobId::from_bytes(r.bytes(len)?).map_err(|e| FormatError::Invalid { what: "chunk id", detail: e.into() })?;
            chunks.push((id, r.u64()?));
        }
        if !r.is_empty() {
            return Err(FormatError::Invalid { what: "chunk list", detail: format!("{n} chunks do not fill {} bytes", buf.len()) });
        }
        // Checked: sizes that wrap around u64 must not pass for the total.
        if chunks.iter().try_fold(0u64, |sum, c| sum.checked_add(c.1)) != Some(total_size) {
            return Err(FormatError::Invalid { what: "chunk list", detail: "chunk sizes do not add up to the total".into() });
        }
        Ok(Self { chunk_size, total_size, chunks })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_types::BlobKind;

    #[test]
    fn round_trip() {
        let mut rng = rand_like();
        let chunks: Vec<_> = (0..5).map(|i| (BlobId::from_parts(BlobKind::Chunk, i, rng()), if i == 4 { 7 } else { 100 })).collect();
        let l = ChunkList { chunk_size: 100, total_size: 407, chunks };
        let b = l.encode();
        assert_eq!(ChunkList::decode(&b).unwrap(), l);
        let mut bad = b.clone();
        bad[40] ^= 1;
        assert!(ChunkList::decode(&bad).is_err());
    }

    #[test]
    fn chunks_of_another_container_make_a_version_2_list() {
        let c = strata_types::ContainerRef { account: 2, container: 7 };
        let chunks: Vec<_> = (0..3).map(|i| (BlobId::from_parts(BlobKind::Chunk, i, [i as u8; 16]).in_container(c), 10)).collect();
        let l = ChunkList { chunk_size: 10, total_size: 30, chunks };
        let b = l.encode();
        assert_eq!(u16::from_le_bytes([b[8], b[9]]), CHUNK_LIST_VERSION_CONTAINERS);
        assert_eq!(b.len(), 36 + 3 * 39);
        assert_eq!(ChunkList::decode(&b).unwrap(), l);
        // An id length that runs past the end is refused, not read out of bounds.
        let mut bad = b[..b.len() - 4].to_vec();
        bad[32] = 200;
        let crc = crate::crc::crc32c(&bad);
        bad.extend_from_slice(&crc.to_le_bytes());
        assert!(ChunkList::decode(&bad).is_err());
        // Default-container chunks keep version 1, byte for byte.
        let v1 = ChunkList { chunk_size: 10, total_size: 10, chunks: vec![(BlobId::from_parts(BlobKind::Chunk, 1, [1; 16]), 10)] }.encode();
        assert_eq!((u16::from_le_bytes([v1[8], v1[9]]), v1.len()), (CHUNK_LIST_VERSION, 36 + 34));
    }

    /// Found by the fuzzer: sizes whose sum wraps around u64 passed (or,
    /// in a debug build, panicked) where they must fail.
    #[test]
    fn sizes_that_wrap_around_do_not_add_up() {
        let chunks = vec![(BlobId::from_parts(BlobKind::Chunk, 1, [1; 16]), u64::MAX), (BlobId::from_parts(BlobKind::Chunk, 2, [2; 16]), 2)];
        let b = ChunkList { chunk_size: u64::MAX, total_size: 1, chunks }.encode();
        assert!(ChunkList::decode(&b).is_err());
    }

    fn rand_like() -> impl FnMut() -> [u8; 16] {
        let mut x = 1u8;
        move || {
            x = x.wrapping_mul(37).wrapping_add(11);
            [x; 16]
        }
    }
}

//! The chunk list stored as the data of a composite (metadata) blob
//! (Ambry Fig. 4), format version 1:
//!
//! ```text
//!  0  8  magic "STRACHL\0"
//!  8  2  version (1)
//! 10  2  reserved (0)
//! 12  4  chunk count N
//! 16  8  chunk size in bytes (every chunk but the last has this size)
//! 24  8  total blob size in bytes
//! 32  N × 34: chunk blob id (26 bytes, binary form) | chunk size u64
//! end 4  CRC32C of every preceding byte
//! ```

use crate::{FormatError, Reader, check_crc};
use strata_types::BlobId;

const MAGIC: &[u8; 8] = b"STRACHL\0";
/// Format version written by this code.
pub const CHUNK_LIST_VERSION: u16 = 1;

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
        let mut b = Vec::with_capacity(36 + self.chunks.len() * 34);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&CHUNK_LIST_VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&(self.chunks.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.chunk_size.to_le_bytes());
        b.extend_from_slice(&self.total_size.to_le_bytes());
        for (id, size) in &self.chunks {
            b.extend_from_slice(&id.to_bytes());
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
        if v != CHUNK_LIST_VERSION {
            return Err(FormatError::Version { what: "chunk list", version: v.into() });
        }
        r.u16()?;
        let n = r.u32()? as usize;
        let chunk_size = r.u64()?;
        let total_size = r.u64()?;
        if buf.len() != 36 + n * 34 {
            return Err(FormatError::Invalid { what: "chunk list", detail: format!("{n} chunks do not fill {} bytes", buf.len()) });
        }
        let mut chunks = Vec::with_capacity(n);
        for _ in 0..n {
            let id = BlobId::from_bytes(r.bytes(BlobId::BYTES)?).map_err(|e| FormatError::Invalid { what: "chunk id", detail: e.into() })?;
            chunks.push((id, r.u64()?));
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

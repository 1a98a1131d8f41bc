//! Strata's on-disk byte layouts: log records, log-segment headers, index
//! files, Bloom filters, replica metadata and the compaction log.
//!
//! Every layout is explicit little-endian with a magic, a format version and a
//! CRC32C that is checked before anything else is trusted. `docs/formats.md`
//! describes the same bytes in prose; a change here bumps a version there.
//! This crate does no I/O and must not depend on the engine or anything above.
//!
//! Layer rule (checked by the test command): may use strata-types; never
//! the engine, an async runtime or an HTTP crate.

pub mod bloom;
pub mod chunk_list;
pub mod crc;
pub mod damage;
pub mod frame;
pub mod headers;
pub mod index;
pub mod record;
pub mod rw_session;

pub use bloom::Bloom;
pub use chunk_list::ChunkList;
pub use damage::DamagedRange;
pub use headers::{CompactionPhase, CompactionRecord, LsnReservation, ReplicaMeta, SegmentHeader};
pub use index::{EntryKind, IndexEntry, IndexFileHeader};
pub use record::{DecodedRecord, PutProps, RecordKind};

/// Errors found while decoding bytes read from disk or the network.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    /// Fewer bytes than the layout needs; at the tail of a log this is a torn write.
    #[error("truncated {what}: need {need} bytes, have {have}")]
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// The magic number is wrong: these bytes are not this structure.
    #[error("bad magic in {what}")]
    BadMagic {
        /// Which structure.
        what: &'static str,
    },
    /// A format version this code cannot read.
    #[error("unsupported {what} version {version}")]
    Version {
        /// Which structure.
        what: &'static str,
        /// The version found.
        version: u32,
    },
    /// The checksum does not match: the bytes are corrupt or torn.
    #[error("checksum mismatch in {what}: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// Which structure.
        what: &'static str,
        /// CRC stored in the bytes.
        stored: u32,
        /// CRC computed over them.
        computed: u32,
    },
    /// A field holds a value that the layout forbids.
    #[error("invalid {what}: {detail}")]
    Invalid {
        /// Which field.
        what: &'static str,
        /// Why.
        detail: String,
    },
}

/// A bounds-checked little-endian reader over a byte slice.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, pos: 0, what }
    }
    pub(crate) fn pos(&self) -> usize {
        self.pos
    }
    pub(crate) fn is_empty(&self) -> bool {
        self.pos == self.buf.len()
    }
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len()).ok_or(FormatError::Truncated {
            what: self.what,
            need: self.pos.saturating_add(n),
            have: self.buf.len(),
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub(crate) fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.bytes(1)?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.bytes(2)?.try_into().expect("2 bytes")))
    }
    pub(crate) fn u32(&mut self) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().expect("4 bytes")))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().expect("8 bytes")))
    }
    pub(crate) fn string(&mut self, len: usize) -> Result<String, FormatError> {
        let b = self.bytes(len)?;
        String::from_utf8(b.to_vec()).map_err(|_| FormatError::Invalid { what: self.what, detail: "string is not UTF-8".into() })
    }
}

/// Checks a CRC32C stored little-endian in `stored` against `crc32c(body)`.
pub(crate) fn check_crc(what: &'static str, body: &[u8], stored: &[u8]) -> Result<(), FormatError> {
    let stored = u32::from_le_bytes(stored.try_into().expect("4-byte crc"));
    let computed = crate::crc::crc32c(body);
    if stored != computed {
        return Err(FormatError::Checksum { what, stored, computed });
    }
    Ok(())
}

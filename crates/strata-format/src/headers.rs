//! Small fixed-size headers: log segment header, replica metadata and
//! compaction-log records. Each is 64 bytes (32 for compaction records) and
//! ends with a CRC32C of the bytes before it.

use crate::{FormatError, Reader, check_crc};

/// Size of a log segment header; the first record starts here.
pub const SEGMENT_HEADER_BYTES: usize = 64;
const SEGMENT_MAGIC: &[u8; 8] = b"STRALOG\0";
const REPLICA_MAGIC: &[u8; 8] = b"STRAREP\0";
const COMPACTION_MAGIC: u32 = 0x504d_4353; // "SCMP"
const LSN_MAGIC: &[u8; 8] = b"STRALSN\0";
/// Format version of segment headers and replica metadata.
pub const HEADER_VERSION: u16 = 1;
/// Size of a replica metadata file.
pub const REPLICA_META_BYTES: usize = 64;
/// Size of one compaction-log record.
pub const COMPACTION_RECORD_BYTES: usize = 32;
/// Size of a replica's lsn reservation file.
pub const LSN_RESERVATION_BYTES: usize = 32;

fn seal(mut b: Vec<u8>, len: usize) -> Vec<u8> {
    b.resize(len - 4, 0);
    let crc = crate::crc::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn open<'a>(buf: &'a [u8], len: usize, what: &'static str) -> Result<Reader<'a>, FormatError> {
    if buf.len() < len {
        return Err(FormatError::Truncated { what, need: len, have: buf.len() });
    }
    check_crc(what, &buf[..len - 4], &buf[len - 4..len])?;
    Ok(Reader::new(&buf[..len - 4], what))
}

fn check_magic_version(r: &mut Reader<'_>, magic: &[u8; 8], what: &'static str) -> Result<(), FormatError> {
    if r.bytes(8)? != magic {
        return Err(FormatError::BadMagic { what });
    }
    let v = r.u16()?;
    if v != HEADER_VERSION {
        return Err(FormatError::Version { what, version: v.into() });
    }
    Ok(())
}

/// Header of a log segment file:
/// `magic "STRALOG\0" | version u16 | reserved u16 | partition u64 | segment id u64 |
/// generation u32 | incarnation [16] | reserved | crc u32 @60`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Partition the segment belongs to.
    pub partition: u64,
    /// Position of the segment in the log.
    pub segment_id: u64,
    /// Bumped each time compaction rewrites the segment.
    pub generation: u32,
    /// The replica incarnation that created it.
    pub incarnation: [u8; 16],
}

impl SegmentHeader {
    /// Encodes to [`SEGMENT_HEADER_BYTES`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(SEGMENT_HEADER_BYTES);
        b.extend_from_slice(SEGMENT_MAGIC);
        b.extend_from_slice(&HEADER_VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&self.partition.to_le_bytes());
        b.extend_from_slice(&self.segment_id.to_le_bytes());
        b.extend_from_slice(&self.generation.to_le_bytes());
        b.extend_from_slice(&self.incarnation);
        seal(b, SEGMENT_HEADER_BYTES)
    }
    /// Decodes and checks.
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = open(buf, SEGMENT_HEADER_BYTES, "segment header")?;
        check_magic_version(&mut r, SEGMENT_MAGIC, "segment header")?;
        r.u16()?;
        Ok(Self { partition: r.u64()?, segment_id: r.u64()?, generation: r.u32()?, incarnation: r.bytes(16)?.try_into().expect("16 bytes") })
    }
}

/// The `replica.meta` file of a partition replica:
/// `magic "STRAREP\0" | version u16 | reserved u16 | partition u64 |
/// incarnation [16] | created_ms u64 | capacity_bytes u64 | reserved | crc u32 @60`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaMeta {
    /// Partition id.
    pub partition: u64,
    /// Random id of this replica's life; a recreated replica gets a new one
    /// so peers know to reset their replication tokens.
    pub incarnation: [u8; 16],
    /// When the replica was created.
    pub created_ms: u64,
    /// Capacity in bytes (the read-only threshold is a fraction of this).
    pub capacity_bytes: u64,
}

impl ReplicaMeta {
    /// Encodes to [`REPLICA_META_BYTES`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(REPLICA_META_BYTES);
        b.extend_from_slice(REPLICA_MAGIC);
        b.extend_from_slice(&HEADER_VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&self.partition.to_le_bytes());
        b.extend_from_slice(&self.incarnation);
        b.extend_from_slice(&self.created_ms.to_le_bytes());
        b.extend_from_slice(&self.capacity_bytes.to_le_bytes());
        seal(b, REPLICA_META_BYTES)
    }
    /// Decodes and checks.
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = open(buf, REPLICA_META_BYTES, "replica meta")?;
        check_magic_version(&mut r, REPLICA_MAGIC, "replica meta")?;
        r.u16()?;
        Ok(Self { partition: r.u64()?, incarnation: r.bytes(16)?.try_into().expect("16 bytes"), created_ms: r.u64()?, capacity_bytes: r.u64()? })
    }
}

/// The `replica.lsn` file of a partition replica: every lsn the replica has
/// handed out, or will hand out before the file is next replaced, is below
/// `lsn_limit`. Recovery restarts the counter at or above it, so an lsn never
/// repeats even when records that peers already pulled were cut off the log.
/// `magic "STRALSN\0" | version u16 | reserved u16 | partition u64 |
/// lsn_limit u64 | crc u32 @28`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LsnReservation {
    /// Partition id.
    pub partition: u64,
    /// No lsn at or above this has been handed out.
    pub lsn_limit: u64,
}

impl LsnReservation {
    /// Encodes to [`LSN_RESERVATION_BYTES`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(LSN_RESERVATION_BYTES);
        b.extend_from_slice(LSN_MAGIC);
        b.extend_from_slice(&HEADER_VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&self.partition.to_le_bytes());
        b.extend_from_slice(&self.lsn_limit.to_le_bytes());
        seal(b, LSN_RESERVATION_BYTES)
    }
    /// Decodes and checks.
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = open(buf, LSN_RESERVATION_BYTES, "lsn reservation")?;
        check_magic_version(&mut r, LSN_MAGIC, "lsn reservation")?;
        r.u16()?;
        Ok(Self { partition: r.u64()?, lsn_limit: r.u64()? })
    }
}

/// A phase of compacting one segment, as recorded in `compaction.log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionPhase {
    /// The new generation is being written; on recovery, roll back (delete it).
    Begin = 1,
    /// The new generation is durable and authoritative; on recovery, roll
    /// forward (delete the old generation).
    Commit = 2,
    /// The old generation is gone.
    Done = 3,
}

/// One compaction-log record:
/// `magic u32 "SCMP" | version u8 | phase u8 | reserved u16 | segment id u64 |
/// from generation u32 | to generation u32 | reserved u32 | crc u32 @28`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionRecord {
    /// The phase reached.
    pub phase: CompactionPhase,
    /// Segment being compacted.
    pub segment_id: u64,
    /// Generation being replaced.
    pub from_generation: u32,
    /// Generation being written.
    pub to_generation: u32,
}

impl CompactionRecord {
    /// Encodes to [`COMPACTION_RECORD_BYTES`] bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(COMPACTION_RECORD_BYTES);
        b.extend_from_slice(&COMPACTION_MAGIC.to_le_bytes());
        b.push(HEADER_VERSION as u8);
        b.push(self.phase as u8);
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&self.segment_id.to_le_bytes());
        b.extend_from_slice(&self.from_generation.to_le_bytes());
        b.extend_from_slice(&self.to_generation.to_le_bytes());
        seal(b, COMPACTION_RECORD_BYTES)
    }
    /// Decodes and checks.
    pub fn decode(buf: &[u8]) -> Result<Self, FormatError> {
        let mut r = open(buf, COMPACTION_RECORD_BYTES, "compaction record")?;
        if r.u32()? != COMPACTION_MAGIC {
            return Err(FormatError::BadMagic { what: "compaction record" });
        }
        let v = r.u8()?;
        if v as u16 != HEADER_VERSION {
            return Err(FormatError::Version { what: "compaction record", version: v.into() });
        }
        let phase = match r.u8()? {
            1 => CompactionPhase::Begin,
            2 => CompactionPhase::Commit,
            3 => CompactionPhase::Done,
            p => return Err(FormatError::Invalid { what: "compaction phase", detail: p.to_string() }),
        };
        r.u16()?;
        Ok(Self { phase, segment_id: r.u64()?, from_generation: r.u32()?, to_generation: r.u32()? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let s = SegmentHeader { partition: 3, segment_id: 9, generation: 2, incarnation: [7; 16] };
        assert_eq!(SegmentHeader::decode(&s.encode()).unwrap(), s);
        let m = ReplicaMeta { partition: 3, incarnation: [1; 16], created_ms: 5, capacity_bytes: 1 << 30 };
        assert_eq!(ReplicaMeta::decode(&m.encode()).unwrap(), m);
        let c = CompactionRecord { phase: CompactionPhase::Commit, segment_id: 4, from_generation: 0, to_generation: 1 };
        let mut b = c.encode();
        assert_eq!(CompactionRecord::decode(&b).unwrap(), c);
        b[9] ^= 1;
        assert!(CompactionRecord::decode(&b).is_err());
        let l = LsnReservation { partition: 3, lsn_limit: 1 << 40 };
        let mut b = l.encode();
        assert_eq!(b.len(), LSN_RESERVATION_BYTES);
        assert_eq!(LsnReservation::decode(&b).unwrap(), l);
        b[20] ^= 1;
        assert!(LsnReservation::decode(&b).is_err());
    }
}

//! What the client and the participants say to each other, and what a
//! participant keeps on its row: items, operations, chains, steps and
//! decisions. All of it travels and is stored in one envelope
//! ([`encode`]/[`decode`]): a magic, a format version, postcard, CRC32C.

use crate::error::TxnError;
use serde::{Deserialize, Serialize};

/// A transaction's id, drawn at random by its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TxnId(pub [u8; 16]);

impl TxnId {
    /// The id written in hex (as [`Display`](std::fmt::Display) writes it).
    pub fn parse(s: &str) -> Option<Self> {
        if s.len() != 32 || !s.is_ascii() {
            return None;
        }
        let mut b = [0u8; 16];
        for (i, out) in b.iter_mut().enumerate() {
            *out = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Self(b))
    }

    /// A random id.
    pub fn random() -> Self {
        let mut b = [0u8; 16];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut b);
        Self(b)
    }
}

impl std::fmt::Display for TxnId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// A Týr blob's GUID: the 128-bit hash of its name.
pub type Guid = [u8; 16];

/// The GUID of the blob named `name`.
pub fn guid_of(name: &str) -> Guid {
    xxhash_rust::xxh3::xxh3_128(format!("tyr\0{name}").as_bytes()).to_be_bytes()
}

/// What a transaction reads or writes on one participant row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Item {
    /// A blob's record on its version managers (its size and chunk size,
    /// versioned by commit sequence: the blob's versions).
    Blob(Guid),
    /// One chunk of a blob, versioned by commit sequence.
    Chunk(Guid, u64),
}

impl Item {
    /// The blob the item belongs to.
    pub fn guid(&self) -> &Guid {
        match self {
            Self::Blob(g) | Self::Chunk(g, _) => g,
        }
    }
}

/// A change to an item, applied when the transaction installs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// On a blob record: the blob is at least `size` bytes long after the
    /// transaction (sizes only grow), in chunks of `chunk_bytes`.
    Grow {
        /// Bytes.
        size: u64,
        /// The chunk size the writer used (fixed at the blob's first write).
        chunk_bytes: u64,
    },
    /// On a chunk: bytes at an offset in the chunk (the chunk grows with
    /// zeros to reach it).
    Put {
        /// Offset in the chunk.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// On a chunk: adds `delta` to the little-endian 64-bit integer at an
    /// offset in the chunk (wrapping; a missing one reads 0), applied to
    /// the version the transaction installs over, on the server.
    Add {
        /// Offset in the chunk.
        offset: u64,
        /// The amount (negative subtracts).
        delta: i64,
    },
}

/// What a transaction read of an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    /// The item.
    pub item: Item,
    /// For a chunk, the version read (0: none); for a blob record, the size read.
    pub seen: u64,
}

/// A write of an item: its operations in the order the transaction made them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    /// The item.
    pub item: Item,
    /// The operations.
    pub ops: Vec<Op>,
    /// The blob's chunk size as the writer knows it.
    pub chunk_bytes: u64,
}

/// One participant of a commit chain: a row, as version manager of the
/// blobs whose records it holds (`vm`) or as holder of chunks. A row may
/// be both in one transaction: two hops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Hop {
    /// False for the version-manager hops, which sort first.
    pub chunks: bool,
    /// The row's partition.
    pub row: u64,
}

/// A forward-pass step, sent to the primary of `chain[index]`'s row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The transaction.
    pub txn: TxnId,
    /// Every hop, in the global order; the last one decides.
    pub chain: Vec<Hop>,
    /// This step's hop.
    pub index: u32,
    /// The row version the client's map holds.
    pub row_version: u64,
    /// What the transaction read on this hop, to validate.
    pub reads: Vec<Read>,
    /// What it writes on this hop.
    pub writes: Vec<Write>,
    /// The commit sequence must exceed this (the bounds of earlier hops).
    pub bound: u64,
    /// True when the transaction writes nothing anywhere (the decider then
    /// records no decision: there is nothing to install).
    pub read_only: bool,
}

impl Step {
    /// This step's hop.
    pub fn hop(&self) -> Hop {
        self.chain[self.index as usize]
    }
    /// True for the chain's last hop, which decides.
    pub fn decides(&self) -> bool {
        self.index as usize + 1 == self.chain.len()
    }
}

/// What a step answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepAnswer {
    /// Validated and held here (durably); the commit sequence must exceed `bound`.
    Prepared {
        /// The bound so far.
        bound: u64,
    },
    /// The decider committed the transaction at this sequence.
    Committed {
        /// The commit sequence (0 for a read-only transaction).
        seq: u64,
    },
    /// Validation failed, or the transaction was decided aborted: no
    /// effect here.
    Aborted {
        /// Why.
        reason: String,
    },
}

/// A transaction's decision, kept by its decider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// Committed at this sequence.
    Commit(u64),
    /// Aborted.
    Abort,
}

/// The backward pass: the decision, sent to one hop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finish {
    /// The transaction.
    pub txn: TxnId,
    /// The hop.
    pub hop: Hop,
    /// The row version the client's map holds.
    pub row_version: u64,
    /// What was decided.
    pub decision: Decision,
}

/// A question to a decider about a transaction it may not have seen: it
/// answers the decision, and decides Abort if there is none yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolve {
    /// The transaction.
    pub txn: TxnId,
    /// The decider's hop.
    pub hop: Hop,
    /// The row version the asker's map holds.
    pub row_version: u64,
}

/// A read through a blob's version manager: the blob's latest version,
/// and the chunks covering a byte range as of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmRead {
    /// The blob.
    pub guid: Guid,
    /// The row version the client's map holds of the blob's metadata row.
    pub row_version: u64,
    /// First byte.
    pub offset: u64,
    /// Bytes (clipped to the blob's size).
    pub len: u64,
}

/// A blob version as a version manager saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The blob's version: the commit sequence of its last write (0: never written).
    pub version: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its chunk size (0 when never written).
    pub chunk_bytes: u64,
}

/// One chunk as of a blob version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkData {
    /// The chunk's index.
    pub index: u64,
    /// The version read (0: never written, all zeros).
    pub version: u64,
    /// Its bytes (shorter than a chunk when its end was never written).
    pub data: Vec<u8>,
}

/// What a version-manager read answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmAnswer {
    /// The blob version read.
    pub snapshot: Snapshot,
    /// When the version manager took it (its clock, ms): later reads under
    /// it are refused after the read lease.
    pub taken_ms: u64,
    /// The chunks covering the range, as of it.
    pub chunks: Vec<ChunkData>,
}

/// A question to a blob's version manager from a row primary's version
/// collector: which versions of the blob are in use (added after the
/// first release of the envelope: a new message, no layout changed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageQuery {
    /// The blob.
    pub guid: Guid,
    /// The row version the asker's map holds of the blob's metadata row.
    pub row_version: u64,
}

/// The versions of a blob in use, as its version manager knows them
/// (Týr §IV-E): every reader from now on gets a blob version of at least
/// `shown`, and the running transactions that read the blob through this
/// version manager read the versions in `in_use` (distinct, ascending).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// The blob version a reader gets now.
    pub shown: u64,
    /// Blob versions running transactions (and reads in progress) read.
    pub in_use: Vec<u64>,
    /// False while this node has led the blob's metadata row for less than
    /// the read lease: readers that an earlier primary served are unknown
    /// to it, so only the lease may clear a version.
    pub complete: bool,
}

impl Usage {
    /// Whether version `x` of a chunk, superseded by `y`, may go now: no
    /// reader from now on gets a blob version below `y`, and no running
    /// one reads a blob version in `[x, y)` (those that would find `x`).
    pub fn clears(&self, x: u64, y: u64) -> bool {
        self.complete && y <= self.shown && !self.in_use.iter().any(|v| (x..y).contains(v))
    }
}

/// A direct read of one chunk as of a blob version (later reads of a
/// blob in a transaction, and the version manager's relay).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRead {
    /// The blob.
    pub guid: Guid,
    /// The chunk.
    pub index: u64,
    /// The blob version to read as of.
    pub as_of: u64,
    /// When that blob version was taken (ms).
    pub taken_ms: u64,
    /// The row version the reader's map holds of the chunk's row.
    pub row_version: u64,
}

/// What a participant keeps on its row while a transaction holds it: the
/// step as it arrived, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The step.
    pub step: Step,
    /// When it was placed (ms since the epoch).
    pub placed_ms: u64,
    /// The bound it answered.
    pub bound: u64,
    /// The blobs whose size this step grows (it holds their records
    /// alone; a write that does not grow a blob shares its record with
    /// other such writes).
    pub grows: Vec<Guid>,
}

/// Envelope magic.
const MAGIC: &[u8; 4] = b"STXN";
/// Envelope format version.
pub const FORMAT_VERSION: u8 = 1;

/// One value in the envelope: `STXN`, version, postcard body, CRC32C of
/// all before it (little-endian).
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.push(FORMAT_VERSION);
    // postcard writes into a Vec without failing for these types.
    out.extend(postcard::to_stdvec(value).unwrap_or_default());
    let crc = crc32c::crc32c(&out);
    out.extend(crc.to_le_bytes());
    out
}

/// Reads one value from the envelope, checking magic, version and CRC.
pub fn decode<T: for<'a> Deserialize<'a>>(bytes: &[u8]) -> Result<T, TxnError> {
    if bytes.len() < 9 || &bytes[..4] != MAGIC {
        return Err(TxnError::Corrupt(format!("{} bytes without the STXN envelope", bytes.len())));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let want = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32c::crc32c(body) != want {
        return Err(TxnError::Corrupt("CRC32C mismatch".into()));
    }
    if body[4] != FORMAT_VERSION {
        return Err(TxnError::Corrupt(format!("format version {} (this build reads {FORMAT_VERSION})", body[4])));
    }
    postcard::from_bytes(&body[5..]).map_err(|e| TxnError::Corrupt(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_clears_only_versions_no_reader_can_find() {
        let u = Usage { shown: 9, in_use: vec![3, 6], complete: true };
        // Chunk versions 2 (until 4), 4 (until 7), 7 (until 9), 9 (newest).
        assert!(!u.clears(2, 4), "a reader of blob version 3 finds 2");
        assert!(!u.clears(4, 7), "a reader of blob version 6 finds 4");
        assert!(u.clears(7, 9), "readers of 7 and 8: none");
        assert!(!u.clears(9, 12), "a successor beyond what readers get now");
        assert!(!Usage { complete: false, ..u.clone() }.clears(7, 9), "an incomplete usage clears nothing");
        assert!(TxnId::parse(&TxnId([0xab; 16]).to_string()) == Some(TxnId([0xab; 16])));
        assert!(TxnId::parse("xyz").is_none() && TxnId::parse(&"g".repeat(32)).is_none());
    }

    #[test]
    fn the_envelope_round_trips_and_refuses_damage() {
        let d = Decision::Commit(42);
        let mut b = encode(&d);
        assert_eq!(decode::<Decision>(&b).unwrap(), d);
        let last = b.len() - 6;
        b[last] ^= 1;
        assert!(matches!(decode::<Decision>(&b), Err(TxnError::Corrupt(m)) if m.contains("CRC")));
        let mut v = encode(&d);
        v[4] = 9;
        let n = v.len() - 4;
        let crc = crc32c::crc32c(&v[..n]).to_le_bytes();
        v[n..].copy_from_slice(&crc);
        assert!(matches!(decode::<Decision>(&v), Err(TxnError::Corrupt(m)) if m.contains("format version 9")));
        assert!(decode::<Decision>(b"nope").is_err());
    }
}

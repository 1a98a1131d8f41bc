//! Message types and their framing.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use strata_engine::{EngineError, ReadOnlyReason};
use strata_format::PutProps;
use strata_format::frame::{decode_frame, frame_around};
use strata_types::{Key, PartitionId};

/// Frame kind of a write and its answer.
pub const KIND_WRITE: u16 = 0x20;
/// Frame kind of a read and its answer.
pub const KIND_READ: u16 = 0x21;
/// Frame kind of a journal request (batched over partitions) and its answer.
pub const KIND_JOURNAL: u16 = 0x22;
/// Frame kind of a fetch of records for replication and its answer.
pub const KIND_FETCH: u16 = 0x23;
/// Frame kind of a scrubber's digest request (a page of a replica's keys
/// with their states and, deep, data checksums) and its answer.
pub const KIND_DIGEST: u16 = 0x24;
/// Frame kind of a read of a read-write store key's versions on one replica.
pub const KIND_RW_GET: u16 = 0x25;
/// Frame kind of a write of one version to one replica of a read-write store.
pub const KIND_RW_PUT: u16 = 0x26;
/// Frame kind of a put handed to the key's pseudo-master to coordinate.
pub const KIND_RW_COORDINATE: u16 = 0x27;
/// Frame kind of a read of several keys of a read-write store on one
/// replica (a multi-get's share of one node).
pub const KIND_RW_GET_MANY: u16 = 0x28;

/// A read of a read-write store key on one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RwGetRequest {
    /// Store.
    pub store: String,
    /// Key.
    pub key: Vec<u8>,
}

/// A read of several keys of a read-write store on one replica.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RwGetManyRequest {
    /// Store.
    pub store: String,
    /// Keys.
    pub keys: Vec<Vec<u8>>,
}

/// One version of a read-write store key: its clock's byte form and its
/// value (`None`: a delete).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireVersion {
    /// The vector clock's byte form.
    pub clock: Vec<u8>,
    /// The value, or `None` for a delete.
    pub value: Option<Vec<u8>>,
}

/// A write of one version to one replica (its own checks apply).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RwPutRequest {
    /// Store.
    pub store: String,
    /// Key.
    pub key: Vec<u8>,
    /// The version.
    pub version: WireVersion,
}

/// A put for the key's pseudo-master to coordinate: the clock the client
/// read (byte form), the value (`None`: a delete), an optional put transform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RwCoordinateRequest {
    /// Store.
    pub store: String,
    /// Key.
    pub key: Vec<u8>,
    /// The version the client read, with its value or none.
    pub version: WireVersion,
    /// A put transform's name.
    pub transform: Option<String>,
}

/// A page of a replica's key digests, for comparing replicas (scrub).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestRequest {
    /// Partition.
    pub partition: PartitionId,
    /// Keys after this one (encoded); from the first when `None`.
    pub after: Option<Vec<u8>>,
    /// Most keys in the page.
    pub max: u32,
    /// Whether each live record is read, checked and its data checksummed.
    pub deep: bool,
}

/// One key's digest on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireDigest {
    /// Encoded key.
    pub key: Vec<u8>,
    /// 1 live, 2 deleted, 3 damaged.
    pub state: u8,
    /// Effective expiry of a live key.
    pub expiry_ms: u64,
    /// CRC32C of the data (deep digests of live keys).
    pub data_crc: Option<u32>,
}

/// Put properties on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct WireProps {
    /// Absolute expiry, ms (0 = never).
    pub expiry_ms: u64,
    /// MIME type.
    pub content_type: String,
    /// Owner.
    pub owner: String,
    /// User metadata.
    pub meta: Vec<(String, String)>,
}

impl From<&PutProps> for WireProps {
    fn from(p: &PutProps) -> Self {
        Self { expiry_ms: p.expiry_ms, content_type: p.content_type.clone(), owner: p.owner.clone(), meta: p.meta.clone() }
    }
}

impl From<WireProps> for PutProps {
    fn from(p: WireProps) -> Self {
        Self { expiry_ms: p.expiry_ms, content_type: p.content_type, owner: p.owner, meta: p.meta }
    }
}

/// A write, without its data (which follows the header).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireOp {
    /// A put.
    Put {
        /// Encoded key.
        key: Vec<u8>,
        /// Properties.
        props: WireProps,
    },
    /// A delete.
    Delete {
        /// Encoded key.
        key: Vec<u8>,
    },
    /// A TTL update.
    TtlUpdate {
        /// Encoded key.
        key: Vec<u8>,
        /// New expiry.
        expiry_ms: u64,
    },
    /// A whole copy of a blob pushed to a replica whose copy is damaged
    /// (the engine's `ReplicaPut`: it keeps the origin's creation time).
    /// Added after the first release of the protocol, so it comes last.
    Repair {
        /// Encoded key.
        key: Vec<u8>,
        /// Properties, with the effective expiry.
        props: WireProps,
        /// Creation time at the origin.
        created_ms: u64,
    },
}

/// A write request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRequest {
    /// Caller's map epoch.
    pub epoch: u64,
    /// Partition.
    pub partition: PartitionId,
    /// The operation.
    pub op: WireOp,
}

/// A durable write's acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireAck {
    /// Sequence number on that replica.
    pub lsn: u64,
    /// Time recorded.
    pub time_ms: u64,
}

/// A read request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRequest {
    /// Caller's map epoch.
    pub epoch: u64,
    /// Partition.
    pub partition: PartitionId,
    /// Encoded key.
    pub key: Vec<u8>,
    /// Whether to send the data.
    pub with_data: bool,
}

/// A blob's header as read (its data, if any, follows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRecord {
    /// Properties.
    pub props: WireProps,
    /// Creation time.
    pub created_ms: u64,
    /// Effective expiry.
    pub expiry_ms: u64,
    /// Size of the data.
    pub size: u64,
    /// Who put it, if the record says: travels in the message's extension
    /// ([`message_ext`]), not in this header.
    #[serde(skip)]
    pub actor: Option<String>,
}

/// One partition's part of a journal request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalItem {
    /// Partition.
    pub partition: PartitionId,
    /// Records after this sequence number.
    pub after_lsn: u64,
    /// At most this many.
    pub max: u32,
}

/// A journal entry on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEntry {
    /// Sequence number (0 when listed from the index).
    pub lsn: u64,
    /// Encoded key.
    pub key: Vec<u8>,
    /// 1 put, 2 delete, 3 TTL update.
    pub kind: u8,
    /// Record size, bytes (a hint for batching fetches).
    pub record_len: u32,
    /// Who made the change, if the record says: travels in the message's
    /// extension ([`message_ext`]), not in this header.
    #[serde(skip)]
    pub actor: Option<String>,
}

/// What a peer has after a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalChunk {
    /// The peer replica's incarnation: a different one means its log was
    /// recreated and tokens against it start over.
    pub incarnation: [u8; 16],
    /// Entries after the token, in log order.
    pub entries: Vec<WireEntry>,
    /// True when the journal no longer reached back to the token and the
    /// entries are the peer's whole index (every key with its state).
    pub from_index: bool,
    /// Sequence number the peer will give its next record: the token to
    /// store once `entries` are applied locally, if they are all of them.
    pub next_lsn: u64,
    /// Bytes the peer's log holds (for lag in bytes).
    pub used_bytes: u64,
}

/// One partition's answer to a journal request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalAnswer {
    /// Partition.
    pub partition: PartitionId,
    /// The entries, or why not.
    pub result: Result<JournalChunk, WireError>,
}

/// A fetch of records for replication.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchRequest {
    /// Partition.
    pub partition: PartitionId,
    /// Encoded keys.
    pub keys: Vec<Vec<u8>>,
}

/// The state of a fetched key (data of live ones follows the header, in order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fetched {
    /// Live or expired: the put and its effective expiry.
    Live(WireRecord),
    /// Deleted.
    Deleted,
    /// Not on that replica.
    Missing,
    /// That replica's copy is damaged (quarantined): ask another replica.
    /// Added after the first release of the protocol, so it comes last.
    Damaged,
}

/// Errors a node answers with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum WireError {
    /// No record of the key.
    #[error("not found")]
    NotFound,
    /// Deleted.
    #[error("deleted")]
    Deleted,
    /// Expired.
    #[error("expired")]
    Expired,
    /// A put for an existing key.
    #[error("key already exists")]
    AlreadyExists,
    /// Read-only: full by policy (`capacity`), the disk is full, or an I/O failure.
    #[error("partition {partition} is read-only ({reason})")]
    ReadOnly {
        /// Partition.
        partition: PartitionId,
        /// `capacity`, `disk_full` or `io_failed`.
        reason: String,
    },
    /// Overloaded; retry later.
    #[error("partition {0} is busy")]
    Busy(PartitionId),
    /// Too large.
    #[error("record of {size} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Size.
        size: u64,
        /// Limit.
        max: u64,
    },
    /// Malformed.
    #[error("invalid: {0}")]
    Invalid(String),
    /// This node holds no replica of the partition. With `stale` the
    /// caller's map is older than the node's: refresh it.
    #[error("no replica of partition {partition} here (node epoch {node_epoch}{})", if *stale { ", caller's map is stale" } else { "" })]
    NoReplica {
        /// Partition.
        partition: PartitionId,
        /// The node's map epoch.
        node_epoch: u64,
        /// Whether the caller's epoch is behind.
        stale: bool,
    },
    /// Anything else (corruption, I/O, shutting down).
    #[error("{0}")]
    Internal(String),
    /// The node's copy of the key is damaged and quarantined until repaired;
    /// another replica may hold it whole. Comes last: variants are numbered
    /// by position on the wire.
    #[error("partition {partition}: {detail}")]
    Damaged {
        /// Partition.
        partition: PartitionId,
        /// What is damaged.
        detail: String,
    },
    /// A read-write store put whose clock does not follow a version held.
    #[error("{0}")]
    Obsolete(String),
    /// A read-write store request that could not reach its required
    /// replicas (says how many answered).
    #[error("{0}")]
    Unavailable(String),
    /// A write or read of a tract row sent under a map older than the
    /// row's last change here (its primary or replicas changed since), or
    /// newer than this node could catch up to: the caller refreshes its
    /// map. A stale primary is fenced off its row by this refusal.
    #[error(
        "partition {partition}: the caller's map (epoch {caller_epoch}) and this node's (epoch {node_epoch}, row version {row_version}) disagree; refresh the map"
    )]
    Fenced {
        /// Partition (the row).
        partition: PartitionId,
        /// The caller's map epoch.
        caller_epoch: u64,
        /// This node's map epoch.
        node_epoch: u64,
        /// The row's version in this node's map.
        row_version: u64,
    },
}

impl From<EngineError> for WireError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::NotFound => Self::NotFound,
            EngineError::Deleted => Self::Deleted,
            EngineError::Expired => Self::Expired,
            EngineError::AlreadyExists => Self::AlreadyExists,
            EngineError::ReadOnly { partition, reason } => Self::ReadOnly {
                partition,
                reason: match reason {
                    ReadOnlyReason::Capacity => "capacity",
                    ReadOnlyReason::DiskFull => "disk_full",
                    ReadOnlyReason::IoFailed => "io_failed",
                }
                .into(),
            },
            EngineError::Busy { partition } => Self::Busy(partition),
            EngineError::TooLarge { size, max } => Self::TooLarge { size, max },
            EngineError::Invalid(m) => Self::Invalid(m),
            EngineError::NoSuchPartition(p) => Self::NoReplica { partition: p, node_epoch: 0, stale: false },
            EngineError::Damaged { partition, detail } => Self::Damaged { partition, detail },
            e => Self::Internal(e.to_string()),
        }
    }
}

impl WireError {
    /// The engine error a caller sees (transport-independent answers map
    /// back one to one; the rest become `Closed`-like internal failures).
    pub fn into_engine(self) -> EngineError {
        match self {
            Self::NotFound => EngineError::NotFound,
            Self::Deleted => EngineError::Deleted,
            Self::Expired => EngineError::Expired,
            Self::AlreadyExists => EngineError::AlreadyExists,
            Self::ReadOnly { partition, reason } => EngineError::ReadOnly {
                partition,
                reason: match reason.as_str() {
                    "capacity" => ReadOnlyReason::Capacity,
                    "disk_full" => ReadOnlyReason::DiskFull,
                    _ => ReadOnlyReason::IoFailed,
                },
            },
            Self::Busy(partition) => EngineError::Busy { partition },
            Self::TooLarge { size, max } => EngineError::TooLarge { size, max },
            Self::Invalid(m) => EngineError::Invalid(m),
            Self::NoReplica { partition, .. } => EngineError::NoSuchPartition(partition),
            Self::Internal(m) => EngineError::Invalid(format!("remote failure: {m}")),
            Self::Damaged { partition, detail } => EngineError::Damaged { partition, detail },
            Self::Obsolete(m) | Self::Unavailable(m) => EngineError::Invalid(m),
            e @ Self::Fenced { .. } => EngineError::Invalid(e.to_string()),
        }
    }
}

/// Why a message does not decode.
#[derive(Debug, thiserror::Error)]
#[error("malformed message: {0}")]
pub struct DecodeError(pub String);

/// Fields added to a message after its first release (who made a
/// change, format version 4 records), encoded after its postcard header
/// and inside the header's length: a node of an earlier release decodes
/// the header and ignores what follows it (postcard reads no further than
/// the header needs), and a message from such a node decodes with the
/// extension's default.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Extension {
    /// A write request's actor; a read answer's record's actor.
    pub actor: Option<String>,
    /// A fetch answer's actors, one per `Fetched::Live` in order; a journal
    /// answer's, one per entry of each chunk in order (answers in order).
    pub actors: Vec<Option<String>>,
}

impl Extension {
    /// Whether there is nothing to send (an earlier release's message).
    pub fn is_empty(&self) -> bool {
        self.actor.is_none() && self.actors.iter().all(Option::is_none)
    }
}

/// [`message`] with an [`Extension`] after the header (none when empty).
pub fn message_ext<H: Serialize>(kind: u16, header: &H, ext: &Extension, data: Vec<Bytes>) -> Vec<Bytes> {
    let mut h = postcard::to_stdvec(header).expect("messages always serialize");
    if !ext.is_empty() {
        h.extend_from_slice(&postcard::to_stdvec(ext).expect("extensions always serialize"));
    }
    message_raw(kind, h, data)
}

/// [`decode_message`], also giving the [`Extension`] after the header
/// (the default when there is none).
pub fn decode_message_ext<H: serde::de::DeserializeOwned>(kind: u16, frame: &Bytes) -> Result<(H, Extension, Bytes), DecodeError> {
    let (head, data) = split_message(kind, frame)?;
    let (header, rest) = postcard::take_from_bytes(head).map_err(|e| DecodeError(e.to_string()))?;
    let ext = if rest.is_empty() { Extension::default() } else { postcard::from_bytes(rest).map_err(|e| DecodeError(format!("extension: {e}")))? };
    Ok((header, ext, data))
}

/// Encodes a message: header then raw data, in one frame of `kind`.
pub fn encode_message<H: Serialize>(kind: u16, header: &H, data: &[&[u8]]) -> Vec<u8> {
    message(kind, header, data.iter().map(|d| Bytes::copy_from_slice(d)).collect()).concat()
}

/// Data parts at least this long are sent as they are, shared rather than
/// copied; shorter ones are gathered into one buffer with their
/// neighbours, so a fetch of many small records is not many tiny writes.
const SHARED_PART_MIN: usize = 64 << 10;

/// The frame of a message of `kind` as chunks to send in order: the
/// frame header with the message header, the data parts (a large one, a
/// blob's bytes, is shared, not copied: a replica write of 256 KiB costs
/// no copy before the transport's own), the checksum. Joined, the chunks
/// are [`encode_message`]'s bytes.
pub fn message<H: Serialize>(kind: u16, header: &H, data: Vec<Bytes>) -> Vec<Bytes> {
    message_raw(kind, postcard::to_stdvec(header).expect("messages always serialize"), data)
}

fn message_raw(kind: u16, h: Vec<u8>, data: Vec<Bytes>) -> Vec<Bytes> {
    let hlen = (h.len() as u32).to_le_bytes();
    let (head, tail) = {
        let mut parts: Vec<&[u8]> = vec![&hlen, &h];
        parts.extend(data.iter().map(|d| &d[..]));
        frame_around(kind, &parts)
    };
    let mut out = Vec::new();
    let mut pending = Vec::with_capacity(head.len() + 4 + h.len());
    pending.extend_from_slice(&head);
    pending.extend_from_slice(&hlen);
    pending.extend_from_slice(&h);
    for d in data {
        if d.len() >= SHARED_PART_MIN {
            out.push(Bytes::from(std::mem::take(&mut pending)));
            out.push(d);
        } else {
            pending.extend_from_slice(&d);
        }
    }
    pending.extend_from_slice(&tail);
    out.push(Bytes::from(pending));
    out.retain(|c| !c.is_empty());
    out
}

/// Decodes a frame of `kind` into its header and the data after it.
pub fn decode_message<H: serde::de::DeserializeOwned>(kind: u16, frame: &Bytes) -> Result<(H, Bytes), DecodeError> {
    let (head, data) = split_message(kind, frame)?;
    let header = postcard::from_bytes(head).map_err(|e| DecodeError(e.to_string()))?;
    Ok((header, data))
}

/// A frame of `kind`'s header bytes and data.
fn split_message(kind: u16, frame: &Bytes) -> Result<(&[u8], Bytes), DecodeError> {
    let (k, payload) = decode_frame(frame).map_err(|e| DecodeError(e.to_string()))?;
    if k != kind {
        return Err(DecodeError(format!("frame kind {k:#x}, expected {kind:#x}")));
    }
    if payload.len() < 4 {
        return Err(DecodeError("payload shorter than its header length".into()));
    }
    let hlen = u32::from_le_bytes(payload[..4].try_into().expect("4 bytes")) as usize;
    if payload.len() < 4 + hlen {
        return Err(DecodeError(format!("header of {hlen} bytes overruns the payload")));
    }
    // Zero-copy: the data is a slice of the received frame.
    let start = payload.as_ptr() as usize - frame.as_ptr() as usize + 4 + hlen;
    let end = start + payload.len() - 4 - hlen;
    Ok((&payload[4..4 + hlen], frame.slice(start..end)))
}

/// Decodes an encoded key, naming the problem.
pub fn decode_key(b: &[u8]) -> Result<Key, WireError> {
    Key::from_encoded(b).ok_or_else(|| WireError::Invalid("malformed key".into()))
}

/// Every answer: the node's epoch and the result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer<T> {
    /// The answering node's map epoch.
    pub epoch: u64,
    /// The result.
    pub result: Result<T, WireError>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write with an actor decodes on a node of the release before the
    /// extension (the header alone, the data intact), and a write from such
    /// a node decodes with no actor.
    #[test]
    fn the_extension_is_invisible_to_the_release_before_it_and_optional_from_it() {
        let req = WriteRequest { epoch: 7, partition: 2, op: WireOp::Delete { key: b"\x01k".to_vec() } };
        let ext = Extension { actor: Some("AKEXAMPLE".into()), ..Extension::default() };
        let data = Bytes::from_static(b"payload");
        let new = Bytes::from(message_ext(KIND_WRITE, &req, &ext, vec![data.clone()]).concat());
        let (old_view, old_data): (WriteRequest, Bytes) = decode_message(KIND_WRITE, &new).unwrap();
        assert_eq!((old_view, old_data), (req.clone(), data.clone()));
        let (h, got, d): (WriteRequest, Extension, Bytes) = decode_message_ext(KIND_WRITE, &new).unwrap();
        assert_eq!((h, got, d), (req.clone(), ext, data.clone()));
        let old = Bytes::from(message(KIND_WRITE, &req, vec![data.clone()]).concat());
        let (h, got, d): (WriteRequest, Extension, Bytes) = decode_message_ext(KIND_WRITE, &old).unwrap();
        assert_eq!((h, got, d), (req.clone(), Extension::default(), data));
        // An empty extension sends nothing: the same bytes as before it.
        assert_eq!(message_ext(KIND_WRITE, &req, &Extension::default(), Vec::new()).concat(), message(KIND_WRITE, &req, Vec::new()).concat());
        // Garbage after the header is refused, not taken for an actor.
        let mut bad = postcard::to_stdvec(&req).unwrap();
        bad.extend_from_slice(&[0xff; 3]);
        let frame = Bytes::from(message_raw(KIND_WRITE, bad, Vec::new()).concat());
        assert!(decode_message_ext::<WriteRequest>(KIND_WRITE, &frame).is_err());
    }

    #[test]
    fn a_message_in_chunks_is_the_encoded_message_and_shares_its_large_parts() {
        let big = Bytes::from(vec![5u8; SHARED_PART_MIN + 1]);
        let parts = vec![Bytes::from_static(b"small"), big.clone(), Bytes::new(), Bytes::from_static(b"tail")];
        let header = FetchRequest { partition: 3, keys: vec![b"k".to_vec()] };
        let chunks = message(KIND_FETCH, &header, parts.clone());
        let joined = chunks.concat();
        let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
        assert_eq!(joined, encode_message(KIND_FETCH, &header, &refs));
        // The large part goes out as it is; the small ones with the header
        // and the checksum, so three chunks in all.
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().any(|c| c.as_ptr() == big.as_ptr()), "the large part was copied");
        let (back, data): (FetchRequest, Bytes) = decode_message(KIND_FETCH, &Bytes::from(joined)).unwrap();
        assert_eq!(back.partition, 3);
        assert_eq!(data, [&b"small"[..], &big, b"tail"].concat());
    }
}

//! The engine's error type.

use strata_format::FormatError;
use strata_types::PartitionId;

/// Why a replica refuses puts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOnlyReason {
    /// Used bytes passed the read-only fraction of capacity.
    Capacity,
    /// The filesystem is at or below its reserve.
    DiskFull,
    /// A write or fsync failed; the replica no longer trusts its tail.
    IoFailed,
}

/// Errors of the storage engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No record of the key.
    #[error("not found")]
    NotFound,
    /// The key was deleted.
    #[error("deleted")]
    Deleted,
    /// The key's blob has expired.
    #[error("expired")]
    Expired,
    /// A put for a key that already exists.
    #[error("key already exists")]
    AlreadyExists,
    /// The replica accepts only reads, deletes and TTL updates.
    #[error("partition {partition} is read-only ({reason:?})")]
    ReadOnly {
        /// Partition.
        partition: PartitionId,
        /// Why.
        reason: ReadOnlyReason,
    },
    /// Too many writes are queued.
    #[error("partition {partition} write queue is full")]
    Busy {
        /// Partition.
        partition: PartitionId,
    },
    /// The record would exceed the limit.
    #[error("record of {size} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Requested.
        size: u64,
        /// Limit.
        max: u64,
    },
    /// The request is malformed.
    #[error("invalid input: {0}")]
    Invalid(String),
    /// Bytes on disk failed a check.
    #[error("corrupt data in {file} at offset {offset}: {source}")]
    Corrupt {
        /// File name.
        file: String,
        /// Byte offset.
        offset: u64,
        /// What failed.
        source: FormatError,
    },
    /// This replica's copy of the key failed its checks and is quarantined
    /// until repaired from another replica (or the key is deleted). Not
    /// "not found": the key may well exist.
    #[error("partition {partition}: {detail}")]
    Damaged {
        /// Partition.
        partition: PartitionId,
        /// What is damaged and where.
        detail: String,
    },
    /// An I/O error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The replica or store is closed or missing.
    #[error("replica closed")]
    Closed,
    /// No such partition on this store.
    #[error("partition {0} does not exist on this node")]
    NoSuchPartition(PartitionId),
}

impl EngineError {
    /// A stable code string for logs, metrics and API errors.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "NotFound",
            Self::Deleted => "Deleted",
            Self::Expired => "Expired",
            Self::AlreadyExists => "AlreadyExists",
            Self::ReadOnly { .. } => "ReadOnly",
            Self::Busy { .. } => "Busy",
            Self::TooLarge { .. } => "TooLarge",
            Self::Invalid(_) => "Invalid",
            Self::Corrupt { .. } => "Corrupt",
            Self::Damaged { .. } => "Damaged",
            Self::Io { .. } => "Io",
            Self::Closed => "Closed",
            Self::NoSuchPartition(_) => "NoSuchPartition",
        }
    }
}

/// Wraps an io::Error with context.
pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EngineError {
    let context = context.into();
    move |source| EngineError::Io { context, source }
}

/// Engine result.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

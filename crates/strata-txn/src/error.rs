//! Why a transaction, or one of its steps, failed.

use strata_types::PartitionId;

/// Why a transaction, or one of its steps, failed.
#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    /// The transaction conflicted with another and was aborted with no
    /// effect; the caller may run it again (the server never does).
    #[error("transaction aborted: {0}")]
    Conflict(String),
    /// The transaction's outcome is unknown: its decision could not be
    /// learnt (its decider row unreachable). It may have committed.
    #[error("transaction outcome unknown: {0}")]
    Unknown(String),
    /// A read under a blob version taken longer ago than the read lease:
    /// the versions it needs may have been reclaimed.
    #[error("the transaction's blob version was taken {age_ms} ms ago, beyond the read lease of {lease_ms} ms: run it again")]
    SnapshotTooOld {
        /// Age of the blob version.
        age_ms: u64,
        /// The lease.
        lease_ms: u64,
    },
    /// The cluster has no tract locator table (Týr's chunks live on its rows).
    #[error("the cluster has no tract locator table (strata tract init)")]
    NoTable,
    /// The request carried another row version than the node's map.
    #[error("row {partition} is at version {current}, the request carried {given}: refresh the map")]
    StaleRow {
        /// The row's partition.
        partition: PartitionId,
        /// The node's version of the row.
        current: u64,
        /// The version the request carried.
        given: u64,
    },
    /// A step went to a node that is not the row's primary.
    #[error("this node is not the primary of row {0}")]
    NotPrimary(PartitionId),
    /// A read went to a node holding no readable replica of the row.
    #[error("this node holds no readable replica of row {0}")]
    NotHere(PartitionId),
    /// The request is malformed or names something impossible.
    #[error("{0}")]
    Invalid(String),
    /// A node could not be reached, or answered with an error.
    #[error("node {node}: {detail}")]
    Unreachable {
        /// The node's address.
        node: String,
        /// What went wrong.
        detail: String,
    },
    /// The storage engine failed.
    #[error(transparent)]
    Engine(#[from] strata_engine::EngineError),
    /// A stored or sent transaction record does not decode.
    #[error("corrupt transaction record: {0}")]
    Corrupt(String),
}

impl TxnError {
    /// The error's code in an HTTP answer (and what the client matches on).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Conflict(_) => "TxnConflict",
            Self::Unknown(_) => "TxnUnknown",
            Self::SnapshotTooOld { .. } => "SnapshotTooOld",
            Self::NoTable => "NoTractTable",
            Self::StaleRow { .. } => "StaleRow",
            Self::NotPrimary(_) => "NotPrimary",
            Self::NotHere(_) => "NotHere",
            Self::Invalid(_) => "InvalidArgument",
            Self::Unreachable { .. } => "Unreachable",
            Self::Engine(_) => "EngineError",
            Self::Corrupt(_) => "CorruptRecord",
        }
    }
}

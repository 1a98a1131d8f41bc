//! Why a tract request failed.

use strata_types::PartitionId;

/// Why a tract request failed.
#[derive(Debug, thiserror::Error)]
pub enum TractError {
    /// The cluster has no tract locator table yet.
    #[error("the cluster has no tract locator table (strata tract init)")]
    NoTable,
    /// The client's row version differs from the node's: refresh the table.
    #[error("row {partition} is at version {current}, the request carried {given}: refresh the tract locator table")]
    StaleRow {
        /// The row's partition.
        partition: PartitionId,
        /// The node's version of the row.
        current: u64,
        /// The version the request carried.
        given: u64,
    },
    /// This node holds no replica of the row (the client's table is old, or
    /// the request went to the wrong node).
    #[error("this node holds no replica of row {0}")]
    NotHere(PartitionId),
    /// This node's replica of the row is still filling after recovery or
    /// growth: it takes writes but refuses reads (FDS §3.5).
    #[error("this node's replica of row {0} is still filling; read another")]
    Filling(PartitionId),
    /// The tract was never written (or its row lost it).
    #[error("no tract {tract} of blob {guid}")]
    NotFound {
        /// Blob.
        guid: String,
        /// Tract index.
        tract: u64,
    },
    /// This node is not the primary of the blob's metadata row (the first
    /// replica of the row that serves): the client's table is old.
    #[error("this node is not the primary of row {0}")]
    NotPrimary(PartitionId),
    /// No blob of that GUID (never created, or deleted).
    #[error("no blob {0}")]
    NoSuchBlob(String),
    /// A create of a blob that exists.
    #[error("blob {0} exists")]
    BlobExists(String),
    /// A tract at or beyond the blob's size (extend the blob first).
    #[error("tract {tract} is beyond the end of blob {guid} ({size} tracts): extend it first")]
    OutOfRange {
        /// Blob.
        guid: String,
        /// Tract index.
        tract: u64,
        /// The blob's size in tracts.
        size: u64,
    },
    /// A write larger than a tract.
    #[error("a tract holds at most {max} bytes, the write has {size}")]
    TooLarge {
        /// Bytes written.
        size: u64,
        /// The table's tract size.
        max: u64,
    },
    /// A malformed request (GUID, tract index, header).
    #[error("{0}")]
    Invalid(String),
    /// The engine failed (I/O, damage, full disk).
    #[error(transparent)]
    Engine(#[from] strata_engine::EngineError),
    /// A node could not be reached or gave no usable answer.
    #[error("node {node}: {detail}")]
    Unreachable {
        /// The node's address.
        node: String,
        /// What went wrong.
        detail: String,
    },
    /// A node answered with an error this client does not retry.
    #[error("node {node}: {error}")]
    Remote {
        /// The node's address.
        node: String,
        /// Its answer.
        error: strata_client::ClientError,
    },
}

//! Router errors: what an operation on a blob can end with.

use strata_engine::{EngineError, ReadOnlyReason};
use strata_types::PartitionId;

/// The replicas' failures, as one line.
fn summary(failures: &[ReplicaError]) -> String {
    failures.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")
}

/// Why an operation could not reach enough replicas: the outcome is
/// unknown (for a write) or nothing answered (for a read); retrying later
/// may succeed. Every cause is its own variant, so callers and the API
/// edges decide on the cause, never on a message.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// A write reached fewer replicas than its policy needs.
    #[error("partition {partition}: {acks} of {needed} acks ({})", summary(failures))]
    QuorumNotMet {
        /// Partition written.
        partition: PartitionId,
        /// Acks the policy needs.
        needed: usize,
        /// Acks received.
        acks: usize,
        /// How the other replicas failed.
        failures: Vec<ReplicaError>,
    },
    /// The policy asks for more acks than the partition has replicas.
    #[error("policy {policy} needs {needed} acks but partition {partition} has {replicas} replicas: 0 acks")]
    PolicyExceedsReplicas {
        /// Partition written.
        partition: PartitionId,
        /// The policy, as written.
        policy: String,
        /// Acks it needs.
        needed: usize,
        /// Replicas the partition has.
        replicas: usize,
    },
    /// Fewer replicas can be reached (not marked down) than the policy needs.
    #[error("policy {policy} needs {needed} acks but only {reachable} of partition {partition}'s {replicas} replicas can be reached: 0 acks")]
    TooFewReachable {
        /// Partition written.
        partition: PartitionId,
        /// The policy, as written.
        policy: String,
        /// Acks it needs.
        needed: usize,
        /// Replicas that can be reached.
        reachable: usize,
        /// Replicas the partition has.
        replicas: usize,
    },
    /// A local-zone operation on a partition with no replica in this zone.
    #[error("partition {partition} has no replica in this zone")]
    NoLocalReplica {
        /// Partition.
        partition: PartitionId,
    },
    /// No replica answered a read.
    #[error("no replica of partition {partition} answered: {}", summary(failures))]
    NoReplicaAnswered {
        /// Partition read.
        partition: PartitionId,
        /// How each replica failed.
        failures: Vec<ReplicaError>,
    },
    /// A listing needs every replica (a key only one holds would be
    /// missed), and some cannot be reached.
    #[error("partition {partition}: {listable} of {replicas} replicas can be listed")]
    NotAllListable {
        /// Partition listed.
        partition: PartitionId,
        /// Replicas that can be listed.
        listable: usize,
        /// Replicas the partition has.
        replicas: usize,
    },
    /// A replica failed while being listed.
    #[error("listing partition {partition}: {failure}")]
    ListingFailed {
        /// Partition listed.
        partition: PartitionId,
        /// How the replica failed.
        failure: ReplicaError,
    },
    /// The partition's replica had an I/O failure and takes no writes.
    #[error("partition {partition} had an I/O failure")]
    IoFailed {
        /// Partition.
        partition: PartitionId,
    },
    /// The replica's write queue is full.
    #[error("partition {partition} is overloaded")]
    Overloaded {
        /// Partition.
        partition: PartitionId,
    },
    /// The replica is closing (the node shuts down).
    #[error("replica is shutting down")]
    ShuttingDown,
    /// A chunk of a chunked blob could not be read.
    #[error("chunk {chunk} of the blob: {cause}")]
    Chunk {
        /// The chunk's blob id.
        chunk: String,
        /// Why.
        cause: Box<Unavailable>,
    },
}

/// How one replica failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The replica answered with an engine error.
    #[error("{0}")]
    Engine(#[from] EngineError),
    /// No answer: the node is down, cut off, slow, marked down by the
    /// failure detector, or answered garbage.
    #[error("{0}")]
    Unreachable(String),
    /// The node answered that its replica failed (an I/O error, damage
    /// to its files, shutting down): it counts against the replica, never
    /// as the node's answer about the blob.
    #[error("{0}")]
    Failed(String),
}

/// Errors of router operations. The API layer maps each to a status once.
#[derive(Debug, thiserror::Error)]
pub enum RouterError {
    /// No such blob.
    #[error("blob not found")]
    NotFound,
    /// The blob was deleted.
    #[error("blob was deleted")]
    Deleted,
    /// The blob's time to live has passed.
    #[error("blob has expired")]
    Expired,
    /// The requested byte range lies outside the blob.
    #[error("range not satisfiable: the blob is {size} bytes")]
    InvalidRange {
        /// Blob size.
        size: u64,
    },
    /// The blob is larger than allowed.
    #[error("blob of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// Size seen so far.
        size: u64,
        /// Limit.
        max: u64,
    },
    /// The request is malformed.
    #[error("{0}")]
    BadRequest(String),
    /// The body ended early or failed while being received.
    #[error("request body incomplete: {0}")]
    IncompleteBody(String),
    /// A put raced a put of the same id (internal; retried with a new id).
    #[error("blob id already exists")]
    AlreadyExists,
    /// No partition accepts writes.
    #[error("no writable partition: storage is full or read-only")]
    NoWritablePartition,
    /// The chosen partition is read-only.
    #[error("partition {0} is read-only")]
    PartitionReadOnly(PartitionId),
    /// The id names a partition this cluster does not have.
    #[error("partition {0} does not exist")]
    NoSuchPartition(PartitionId),
    /// Not enough replicas answered; the outcome is unknown, retry later.
    #[error("unavailable: {0}")]
    Unavailable(#[from] Unavailable),
    /// Every replica that answered holds a damaged (quarantined) copy and
    /// none a whole one: the blob cannot be served until a copy is
    /// repaired. Not "not found", and retrying soon will not help.
    #[error("blob is corrupt: {0}")]
    Corrupt(String),
    /// A put took so long that its blob could be taken for an orphan: it
    /// is freed and the put fails (retrying it is safe).
    #[error("request took too long: {0}")]
    TooSlow(String),
    /// Stored data failed a check, or another internal failure.
    #[error("internal error: {0}")]
    Internal(String),
}

impl RouterError {
    /// A stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFound => "BlobNotFound",
            Self::Deleted => "BlobDeleted",
            Self::Expired => "BlobExpired",
            Self::InvalidRange { .. } => "InvalidRange",
            Self::TooLarge { .. } => "BlobTooLarge",
            Self::BadRequest(_) => "BadRequest",
            Self::IncompleteBody(_) => "IncompleteBody",
            Self::AlreadyExists => "BlobAlreadyExists",
            Self::NoWritablePartition => "InsufficientStorage",
            Self::PartitionReadOnly(_) => "PartitionReadOnly",
            Self::NoSuchPartition(_) => "NoSuchPartition",
            Self::Unavailable(_) => "Unavailable",
            Self::Corrupt(_) => "BlobCorrupt",
            Self::TooSlow(_) => "RequestTimeout",
            Self::Internal(_) => "InternalError",
        }
    }

    /// Combines the failures of a quorum write that did not reach its count.
    pub(crate) fn from_replica_errors(partition: PartitionId, needed: usize, acks: usize, errors: Vec<ReplicaError>) -> Self {
        // A replica full by policy or out of disk makes the whole partition
        // unfit for puts: the router moves on to another partition.
        if errors.iter().any(|e| matches!(e, ReplicaError::Engine(EngineError::ReadOnly { reason: ReadOnlyReason::Capacity | ReadOnlyReason::DiskFull, .. }))) {
            return Self::PartitionReadOnly(partition);
        }
        // An authoritative answer shared by every replica is the answer.
        let engine: Vec<&EngineError> = errors.iter().filter_map(|e| if let ReplicaError::Engine(e) = e { Some(e) } else { None }).collect();
        if !errors.is_empty() && acks == 0 && engine.len() == errors.len() {
            let first = std::mem::discriminant(engine[0]);
            if engine.iter().all(|e| std::mem::discriminant(*e) == first) {
                let Some(ReplicaError::Engine(e)) = errors.into_iter().next() else { unreachable!("all engine errors") };
                return match e {
                    EngineError::ReadOnly { .. } => Self::PartitionReadOnly(partition),
                    other => other.into(),
                };
            }
        }
        Unavailable::QuorumNotMet { partition, needed, acks, failures: errors }.into()
    }
}

impl From<EngineError> for RouterError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::NotFound => Self::NotFound,
            EngineError::Deleted => Self::Deleted,
            EngineError::Expired => Self::Expired,
            EngineError::AlreadyExists => Self::AlreadyExists,
            EngineError::ReadOnly { partition, reason: ReadOnlyReason::Capacity | ReadOnlyReason::DiskFull } => Self::PartitionReadOnly(partition),
            EngineError::ReadOnly { partition, reason: ReadOnlyReason::IoFailed } => Unavailable::IoFailed { partition }.into(),
            EngineError::Busy { partition } => Unavailable::Overloaded { partition }.into(),
            EngineError::TooLarge { size, max } => Self::TooLarge { size, max },
            EngineError::Invalid(m) => Self::BadRequest(m),
            EngineError::NoSuchPartition(p) => Self::NoSuchPartition(p),
            EngineError::Closed => Unavailable::ShuttingDown.into(),
            EngineError::Damaged { partition, detail } => Self::Corrupt(format!("partition {partition}: {detail}")),
            e @ (EngineError::Corrupt { .. } | EngineError::Io { .. }) => Self::Internal(e.to_string()),
        }
    }
}

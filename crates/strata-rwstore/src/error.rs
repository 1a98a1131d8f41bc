//! The read-write stores' errors.

use crate::clock::{ClockError, VectorClock};

/// Why a read-write store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum RwError {
    /// The put's clock does not follow a version held (Spock's
    /// ObsoleteVersionException): read again, and put with the new clock.
    #[error("obsolete version: store {store:?} holds {held}, the put's clock {given} does not follow it")]
    Obsolete {
        /// Store.
        store: String,
        /// The version held that the put does not follow.
        held: VectorClock,
        /// The put's clock.
        given: VectorClock,
    },
    /// A replica on another node refused a put as obsolete (its words).
    #[error("{0}")]
    ObsoleteElsewhere(String),
    /// Another node (a put's pseudo-master) could not reach the required
    /// replicas (its words, with how many answered).
    #[error("{0}")]
    UnavailableElsewhere(String),
    /// Fewer replicas than required answered.
    #[error("{op} on store {store:?}: {got} of {required} required replicas answered ({errors})")]
    InsufficientReplicas {
        /// get, put or delete.
        op: &'static str,
        /// Store.
        store: String,
        /// Successful answers.
        got: u32,
        /// Required answers.
        required: u32,
        /// What the others said.
        errors: String,
    },
    /// The cluster map defines no such read-write store.
    #[error("no read-write store {0:?}")]
    NoSuchStore(String),
    /// A malformed clock.
    #[error(transparent)]
    Clock(#[from] ClockError),
    /// Bad input: names the problem.
    #[error("{0}")]
    Invalid(String),
    /// A value over the store's limit.
    #[error("value of {size} bytes is over store {store:?}'s limit of {limit}")]
    TooLarge {
        /// Store.
        store: String,
        /// Value size.
        size: usize,
        /// Limit.
        limit: usize,
    },
    /// No such transform.
    #[error("no transform {0:?} (known: {known})", known = crate::transform::NAMES.join(", "))]
    UnknownTransform(String),
    /// A transform could not apply to the value.
    #[error("transform {name}: {detail}")]
    Transform {
        /// Transform.
        name: String,
        /// Why.
        detail: String,
    },
    /// A stored version does not decode.
    #[error("stored version of {key} is damaged: {detail}")]
    Corrupt {
        /// Engine key.
        key: String,
        /// Why.
        detail: String,
    },
    /// The engine underneath.
    #[error(transparent)]
    Engine(#[from] strata_engine::EngineError),
    /// A replica could not be reached or failed (transport).
    #[error("node {node}: {detail}")]
    Unreachable {
        /// Node.
        node: u64,
        /// Why.
        detail: String,
    },
}

impl RwError {
    /// A put refused because its clock does not follow a version held,
    /// here or on another node.
    pub fn is_obsolete(&self) -> bool {
        matches!(self, Self::Obsolete { .. } | Self::ObsoleteElsewhere(_))
    }
}

/// Result of read-write store operations.
pub type Result<T, E = RwError> = std::result::Result<T, E>;

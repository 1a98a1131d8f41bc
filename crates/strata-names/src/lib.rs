//! Named blobs (Ambry's named-blob front, the metadata behind Strata's S3
//! API): buckets, object names mapped to blob ids with their properties,
//! multipart uploads in progress; and the identities of every port: access
//! keys with their rights (buckets, containers of native blobs, read-only
//! stores, expiry) and the accounts and containers blob ids name, decided
//! by one function ([`NameState::check`]).
//!
//! All of it is one deterministic state machine, [`NameState`], changed only
//! by [`NameOp`]s. The [`NameIndex`] trait orders and persists the ops: the
//! embedded implementation ([`EmbeddedIndex`]) with a checksummed log and
//! group commit on one node, the replicated one through the Raft metadata
//! service (`strata-cluster`), which applies the same ops on every member.
//! The blobs themselves live in the storage engine; this crate only names
//! them, and tells the caller which blobs an op made unreachable so it can
//! free them through the engine's delete path.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-fs, strata-sse; never the engine, the router, the server, or
//! an HTTP crate.

mod embedded;
pub mod events;
mod layouts;
mod list;
mod op;
mod rights;
mod state;
mod versions;

pub use embedded::EmbeddedIndex;
pub use events::{EventTarget, NameEvent, Outbox};
pub use list::{ListPage, ListQuery};
pub use rights::{ALL_CONTAINERS, Account, BlobGrant, CONTAINER_NAME_MAX, Container, ContainerRef, DEFAULT, Denied, KeyRights, KvGrant, Right, valid_name};
pub use state::{AccessKey, Bucket, ExpiryRule, Grant, KmsKey, NameOp, NameState, ObjectMeta, Outcome, PartMeta, Upload};
pub use versions::{
    Found, LEGAL_HOLD_META, LOCK_MODE_META, LOCK_UNTIL_META, ListedVersion, Lock, LockMode, NULL_VERSION, ObjectLock, VERSION_META, Version, VersionPage,
    Versioning, version_id,
};

use futures_util::future::BoxFuture;
use std::sync::RwLock;

/// Longest object key S3 allows, in bytes.
pub const KEY_BYTES_MAX: usize = 1024;

/// What can go wrong with a name op.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum NameError {
    /// No such bucket.
    #[error("bucket {0:?} does not exist")]
    NoSuchBucket(String),
    /// The bucket exists already.
    #[error("bucket {name:?} exists already")]
    BucketExists {
        /// Bucket.
        name: String,
        /// Whether the asking key owns it.
        yours: bool,
    },
    /// Only empty buckets can be deleted.
    #[error("bucket {0:?} is not empty")]
    BucketNotEmpty(String),
    /// No such object.
    #[error("no object {key:?} in bucket {bucket:?}")]
    NoSuchKey {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
    },
    /// No such multipart upload.
    #[error("no multipart upload {0:?}")]
    NoSuchUpload(String),
    /// A condition of the op does not hold (for example If-None-Match: *).
    #[error("precondition failed: {0}")]
    PreconditionFailed(String),
    /// A part of a completion is missing or changed meanwhile.
    #[error("invalid part: {0}")]
    InvalidPart(String),
    /// Key over [`KEY_BYTES_MAX`].
    #[error("object key is {0} bytes; at most 1024 are allowed")]
    KeyTooLong(usize),
    /// No such access key.
    #[error("no access key {0:?}")]
    NoSuchAccessKey(String),
    /// The access key exists already.
    #[error("access key {0:?} exists already")]
    AccessKeyExists(String),
    /// The index could not persist or replicate the op; nothing is known to
    /// have changed, and the index refuses writes until reopened.
    #[error("name index unavailable: {0}")]
    Unavailable(String),
    // Variants are encoded by index between nodes: new ones go last.
    /// An account or container name that is not 1 to 63 of `a-z 0-9 - _ .`
    /// (or no ids are left).
    #[error("invalid account or container name {0:?}: use 1 to 63 of a-z, 0-9, '-', '_' and '.'")]
    InvalidName(String),
    /// The container exists already.
    #[error("container {0:?} exists already")]
    ContainerExists(String),
    /// No such container.
    #[error("no container {0:?}")]
    NoSuchContainer(String),
    /// The KMS key exists already.
    #[error("KMS key {0:?} exists already")]
    KmsKeyExists(String),
    /// No such KMS key.
    #[error("no KMS key {0:?}")]
    NoSuchKmsKey(String),
    /// Object lock forbids the change (a retention or a legal hold).
    #[error("object lock: {0}")]
    ObjectLocked(String),
    /// The bucket's state does not allow the op (object lock without
    /// versioning, suspending versioning under object lock).
    #[error("{0}")]
    InvalidBucketState(String),
}

/// Orders, persists and applies name ops; reads see every op whose
/// `apply` returned, on any node (after [`NameIndex::barrier`]).
pub trait NameIndex: Send + Sync + 'static {
    /// Validates `op` against the current state, makes it durable (and, for
    /// the replicated index, committed by a quorum) and applies it. Returns
    /// what the op replaced, so the caller can free those blobs.
    fn apply(&self, op: NameOp) -> BoxFuture<'_, Result<Outcome, NameError>>;

    /// Waits until the local state holds every op that returned anywhere
    /// before this call (a no-op on one node; a Raft read index otherwise).
    fn barrier(&self) -> BoxFuture<'_, Result<(), NameError>>;

    /// The state; hold the guard briefly.
    fn state(&self) -> &RwLock<NameState>;

    /// A short description for logs and `/admin/status` ("embedded", "raft").
    fn kind(&self) -> &'static str;
}

/// Reads `f` of the state (a poisoned lock is still readable: the state is
/// only changed by whole ops).
pub fn read<R>(index: &dyn NameIndex, f: impl FnOnce(&NameState) -> R) -> R {
    let guard = index.state().read().unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&guard)
}

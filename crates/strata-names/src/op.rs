//! The ops that change the names ([`NameOp`]): their variants are encoded
//! by index in `names.log` and the Raft log, so new ones go at the end
//! (docs/formats.md, the name index frames). `NameState::apply` gives each its
//! meaning.

use crate::rights::{BlobGrant, ContainerRef, KvGrant};
use crate::state::{AccessKey, ExpiryRule, Grant, KmsKey, ObjectMeta, PartMeta, Upload};
use serde::{Deserialize, Serialize};
use strata_types::BlobId;

/// A change to the names. Times are inside the op, so applying is
/// deterministic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NameOp {
    /// Creates a bucket; a non-admin owner gets read and write on it.
    CreateBucket {
        /// Name (validated by the API).
        name: String,
        /// Creating access key ("" = admin tool).
        owner: String,
        /// Now.
        now_ms: u64,
    },
    /// Deletes an empty bucket (no objects, no uploads in progress).
    DeleteBucket {
        /// Name.
        name: String,
        /// Now (expired objects do not count).
        now_ms: u64,
    },
    /// Allows or stops anonymous reads.
    SetPublic {
        /// Bucket.
        bucket: String,
        /// Public or not.
        public: bool,
    },
    /// Replaces the lifecycle rules.
    SetLifecycle {
        /// Bucket.
        bucket: String,
        /// Rules (empty = none).
        rules: Vec<ExpiryRule>,
    },
    /// Names a blob; returns the object it replaced.
    PutObject {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// The object.
        object: ObjectMeta,
        /// Fail if a live object has the name (`If-None-Match: *`).
        if_absent: bool,
    },
    /// Removes a name; with `blob`, only if the name still points at it.
    DeleteObject {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// Only this blob.
        blob: Option<BlobId>,
    },
    /// Starts a multipart upload.
    CreateUpload {
        /// Bucket.
        bucket: String,
        /// Upload id.
        upload_id: String,
        /// The upload.
        upload: Upload,
    },
    /// Adds or replaces a part; returns the part it replaced.
    PutPart {
        /// Bucket.
        bucket: String,
        /// Upload id.
        upload_id: String,
        /// Part number (1..=10000).
        number: u32,
        /// The part.
        part: PartMeta,
    },
    /// Completes an upload into an object, if the listed parts are still
    /// the ones uploaded; returns the object replaced and the unused parts.
    CompleteUpload {
        /// Bucket.
        bucket: String,
        /// Upload id.
        upload_id: String,
        /// Part numbers and their blobs, as the completion used them.
        used: Vec<(u32, BlobId)>,
        /// The object.
        object: ObjectMeta,
    },
    /// Aborts an upload; returns its parts.
    AbortUpload {
        /// Bucket.
        bucket: String,
        /// Upload id.
        upload_id: String,
    },
    /// Adds an access key.
    CreateKey {
        /// The key.
        key: AccessKey,
    },
    /// Removes an access key.
    DeleteKey {
        /// Key id.
        id: String,
    },
    /// Sets a key's rights on a bucket (both false = none).
    SetGrant {
        /// Key id.
        id: String,
        /// Bucket.
        bucket: String,
        /// Rights.
        grant: Grant,
    },
    /// Names a blob only if the name holds a live object whose ETag is
    /// `etag` (any live object when None): S3's `If-Match` on PutObject, a
    /// compare-and-swap. Returns the object it replaced. (Last: postcard
    /// numbers variants in order, so new ones go at the end.)
    PutObjectIfMatch {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// The object.
        object: ObjectMeta,
        /// The ETag the current object must have.
        etag: Option<String>,
    },
    /// Replaces the metadata of the object whose blob is `blob` (S3's
    /// object tagging changes it in place); everything else stays and
    /// nothing is freed. Refused if the name is gone or now names another
    /// blob. (After `PutObjectIfMatch`: new variants go at the end.)
    SetObjectMeta {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// The blob the object must still have.
        blob: BlobId,
        /// The new metadata.
        meta: Vec<(String, String)>,
        /// Now, ms since the epoch (an expired object counts as gone).
        now_ms: u64,
    },
    /// Creates a container of native blobs (and its account, if new),
    /// giving each the next free id. (After `SetObjectMeta`: new variants
    /// go at the end.)
    CreateContainer {
        /// Account name.
        account: String,
        /// Container name.
        container: String,
        /// Now.
        now_ms: u64,
    },
    /// Sets a key's rights on a container's blobs (all false = none).
    SetBlobGrant {
        /// Key id.
        id: String,
        /// The container ([`ALL_CONTAINERS`]: every container of the account).
        container: ContainerRef,
        /// Rights.
        grant: BlobGrant,
    },
    /// Sets a key's rights on a read-only store (`*`: every store; all false = none).
    SetKvGrant {
        /// Key id.
        id: String,
        /// Store name.
        store: String,
        /// Rights.
        grant: KvGrant,
    },
    /// Sets when a key stops working (0: never).
    SetKeyExpiry {
        /// Key id.
        id: String,
        /// ms since the epoch.
        expires_ms: u64,
    },
    /// Deletes a bucket that holds no live object, aborting the uploads in
    /// progress in it (S3's DeleteBucket); returns their parts to free.
    /// `DeleteBucket`, which refuses a bucket with uploads, keeps its
    /// meaning for the logs that hold it. (After `SetKeyExpiry`: new
    /// variants go at the end.)
    DeleteBucketAbortingUploads {
        /// Name.
        name: String,
        /// Now (expired objects do not count).
        now_ms: u64,
    },
    /// Adds a KMS key (refused if the id exists). (After
    /// `DeleteBucketAbortingUploads`: new variants go at the end.)
    CreateKmsKey {
        /// The key, its material sealed under the root key.
        key: KmsKey,
    },
    /// Enables or disables a KMS key: a disabled key seals no new object
    /// and opens none (its objects read again once it is enabled).
    SetKmsKeyEnabled {
        /// Key id.
        id: String,
        /// Enabled or not.
        enabled: bool,
    },
    /// Enables or suspends a bucket's versioning (once enabled, a bucket
    /// is never unversioned again, as on S3). (After `SetKmsKeyEnabled`:
    /// new variants go at the end.)
    SetVersioning {
        /// Bucket.
        bucket: String,
        /// Enabled, or suspended.
        enabled: bool,
    },
    /// S3's DELETE of a key or of one version of it (see
    /// `NameState::delete_versioned`); returns the object to free.
    DeleteVersioned {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// The version to remove for good (None: add a delete marker).
        version_id: Option<String>,
        /// The new delete marker's version id (when versioning is enabled).
        marker_id: String,
        /// Now: the marker's time, and what a retention is judged by.
        now_ms: u64,
        /// A GOVERNANCE retention does not protect the version.
        bypass_governance: bool,
    },
    /// Enables a bucket's object lock (its versioning must be enabled)
    /// with a default retention: mode and days.
    SetObjectLock {
        /// Bucket.
        bucket: String,
        /// The default retention (None: none).
        default: Option<(crate::versions::LockMode, u32)>,
    },
    /// Changes the retention (`Some(None)`: removes it) or the legal hold
    /// of a version (the current object without `version_id`), as
    /// `NameState::set_lock_state` allows.
    SetLockState {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// The version (None: the current object).
        version_id: Option<String>,
        /// The new retention, if it changes.
        #[allow(clippy::option_option)]
        retention: Option<Option<(crate::versions::LockMode, u64)>>,
        /// The new legal hold, if it changes.
        legal_hold: Option<bool>,
        /// A GOVERNANCE retention may be shortened or removed.
        bypass_governance: bool,
        /// Now: what a retention is judged by.
        now_ms: u64,
    },
    /// Sets (or with None removes) a bucket's configuration document of
    /// `kind` (`cors`, `tagging`, ...). (After `SetLockState`: new variants
    /// go at the end.)
    SetBucketDoc {
        /// Bucket.
        bucket: String,
        /// Which document.
        kind: String,
        /// The document (JSON, the S3 API's), or None to remove it.
        doc: Option<String>,
    },
    /// A lifecycle expiration in a versioned bucket: the current version
    /// of `key`, if it is still `version_id`, becomes noncurrent behind a
    /// new delete marker `marker_id` (in a suspended bucket a null current
    /// version goes, as a DELETE would take it); nothing otherwise, so
    /// every metadata member's sweep may send it and only the first acts.
    /// (After `SetBucketDoc`: new variants go at the end.)
    ExpireVersioned {
        /// Bucket.
        bucket: String,
        /// Key.
        key: String,
        /// The version the expiry was judged on.
        version_id: String,
        /// The delete marker's id.
        marker_id: String,
        /// Now, ms since the epoch.
        now_ms: u64,
    },
    /// `op`, applied on behalf of `who` (an access key), at `now_ms`: the
    /// identity and time its change-capture event carries, and the event
    /// name when the op alone does not say it (a copy is a put to the
    /// names). (After `ExpireVersioned`: new variants go at the end.)
    As {
        /// The access key, if known.
        who: Option<String>,
        /// The event name, if not the op's own.
        kind: Option<String>,
        /// Now, ms since the epoch.
        now_ms: u64,
        /// The op.
        op: Box<NameOp>,
    },
    /// Records that a change-capture target holds every event up to `seq`;
    /// events every target holds leave the outbox.
    TrimEvents {
        /// The target's name.
        target: String,
        /// Its last delivered sequence number.
        seq: u64,
    },
    /// Adds or replaces (keeping its position) a change-capture target, or
    /// with no spec removes it.
    SetEventTarget {
        /// Its name.
        name: String,
        /// What it is (JSON the node reads), or None to remove it.
        spec: Option<String>,
        /// It takes every event, not only those of bucket notifications naming it.
        all: bool,
        /// Now, ms since the epoch.
        now_ms: u64,
    },
}

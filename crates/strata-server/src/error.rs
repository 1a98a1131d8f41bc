//! The one place errors become HTTP statuses and JSON bodies.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use strata_router::RouterError;
use strata_types::IdError;

/// Errors of the HTTP API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// From the router.
    #[error(transparent)]
    Router(#[from] RouterError),
    /// From a read-write store.
    #[error(transparent)]
    Rw(#[from] strata_rwstore::RwError),
    /// From a tract request.
    #[error(transparent)]
    Tract(#[from] strata_tract::TractError),
    /// No open interactive transaction of that id (never begun, ended, or past its timeout).
    #[error("no open transaction {0} (it ended, or was dropped past its timeout)")]
    NoSuchTxn(String),
    /// From a transaction or one of its steps.
    #[error(transparent)]
    Txn(#[from] strata_txn::TxnError),
    /// A malformed blob id.
    #[error(transparent)]
    BadId(#[from] IdError),
    /// A header with a bad value.
    #[error("header {name}: {reason}")]
    BadHeader {
        /// Header name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Too much user metadata.
    #[error("user metadata is {size} bytes, the limit is {max}")]
    MetadataTooLarge {
        /// Size given.
        size: usize,
        /// Limit.
        max: usize,
    },
    /// A Range header this server cannot satisfy or parse.
    #[error("bad range {0:?}: use one range of the form bytes=a-b, bytes=a- or bytes=-n")]
    BadRange(String),
    /// Unknown partition in an admin call.
    #[error("partition {0} does not exist on this node")]
    NoSuchPartition(u64),
    /// A malformed request body or parameter.
    #[error("{0}")]
    BadRequest(String),
    /// No read-only store of that name.
    #[error("no read-only store named {0:?}")]
    NoSuchStore(String),
    /// The store has no such key (or no live version).
    #[error("no such key in store {0:?}")]
    NoSuchKey(String),
    /// A store of that name exists.
    #[error("read-only store {0:?} exists")]
    StoreExists(String),
    /// No change-capture target of that name.
    #[error("no event target {0:?}")]
    NoSuchEventTarget(String),
    /// The target is named by buckets' notification configurations.
    #[error("event target {name:?} is named by the notification configuration of bucket(s) {buckets}; change those first")]
    EventTargetInUse {
        /// The target.
        name: String,
        /// The buckets, comma-separated.
        buckets: String,
    },
    /// A read-only store operation failed: a version rejected (the message
    /// names the file and the problem), or its files unreadable.
    #[error(transparent)]
    Kv(#[from] strata_kv::VersionError),
    /// A fetch could not read its source (the message names the file).
    #[error("fetch failed: {0}")]
    FetchFailed(String),
    /// A read-only store on a ring: this node does not hold the key's
    /// partition (any more). Clients re-read the cluster map and retry
    /// (Spock §4.3.2).
    #[error("this node does not hold the partition of that key in store {store:?} (map epoch {epoch}): re-read the cluster map")]
    NotOwned {
        /// Store.
        store: String,
        /// This node's map epoch.
        epoch: u64,
    },
    /// A read-only store's live version is older than the client has seen
    /// (`x-strata-kv-min-version`): it has not swapped yet. Ask another
    /// replica, or again shortly.
    #[error("store {store:?} serves version {live:?} here, older than the version {wanted} asked for: this node has not swapped yet")]
    VersionBehind {
        /// Store.
        store: String,
        /// Live version here.
        live: Option<u64>,
        /// The oldest version the client accepts.
        wanted: u64,
    },
    /// A cluster call on a single node.
    #[error("this node runs as a single node (start it with --node-id and --meta)")]
    NotClustered,
    /// A metadata call on a node outside the metadata group.
    #[error("this node is not a member of the metadata group")]
    NotAMetadataMember,
    /// The metadata group was initialized already.
    #[error("the metadata group is already initialized")]
    AlreadyInitialized,
    /// The metadata group did not answer.
    #[error("metadata service unavailable: {0}")]
    MetaUnavailable(String),
    /// The cluster map refused a command (a rebalancing under way, say).
    #[error("the cluster map refused it: {0}")]
    ClusterRefused(String),
    /// A named-blob or access-key operation failed.
    #[error(transparent)]
    Names(#[from] strata_names::NameError),
    /// S3 is not enabled on this server.
    #[error("the S3 API is not enabled on this server (start it with --s3-listen)")]
    NoS3,
    /// A scrub pass was asked for while one runs.
    #[error("a scrub pass is already running (see GET /admin/scrub)")]
    ScrubRunning,
    /// An orphan sweep was asked for while one runs.
    #[error("an orphan sweep is already running (see GET /admin/sweep)")]
    SweepRunning,
    /// An internal failure outside the router.
    #[error("internal error: {0}")]
    Internal(String),
    /// A protected endpoint asked without a signature.
    #[error(
        "this endpoint needs a signed request: sign it with an access key (SigV4; the strata CLI finds the admin key a single node writes to its data directory's admin.credentials)"
    )]
    Unauthenticated,
    /// A signature that is malformed, stale or wrong.
    #[error(transparent)]
    Signature(#[from] strata_auth::SigError),
    /// The access key does not exist, expired, or lacks the right.
    #[error(transparent)]
    Denied(#[from] strata_names::Denied),
    /// An endpoint for the cluster's nodes only (replica RPCs, Raft).
    #[error("only the cluster's nodes may call this endpoint (a TLS client certificate from the cluster's CA is needed)")]
    NodesOnly,
    /// A JSON body over the limit.
    #[error("the request body is larger than {max} bytes")]
    BodyTooLarge {
        /// The limit.
        max: usize,
    },
}

impl From<strata_node::kv_fetch::FetchError> for ApiError {
    fn from(e: strata_node::kv_fetch::FetchError) -> Self {
        match e {
            strata_node::kv_fetch::FetchError::Version(v) => Self::Kv(v),
            strata_node::kv_fetch::FetchError::Source(s) => Self::BadRequest(format!("source {s}")),
            e @ strata_node::kv_fetch::FetchError::Transfer { .. } => Self::FetchFailed(e.to_string()),
        }
    }
}

impl ApiError {
    /// Status and stable code.
    pub fn status_code(&self) -> (StatusCode, &'static str) {
        match self {
            Self::Router(e) => {
                let s = match e {
                    RouterError::NotFound | RouterError::NoSuchPartition(_) => StatusCode::NOT_FOUND,
                    RouterError::Deleted | RouterError::Expired => StatusCode::GONE,
                    RouterError::InvalidRange { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
                    RouterError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                    RouterError::BadRequest(_) | RouterError::IncompleteBody(_) => StatusCode::BAD_REQUEST,
                    RouterError::AlreadyExists => StatusCode::CONFLICT,
                    RouterError::NoWritablePartition | RouterError::PartitionReadOnly(_) => StatusCode::INSUFFICIENT_STORAGE,
                    RouterError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                    RouterError::TooSlow(_) => StatusCode::REQUEST_TIMEOUT,
                    RouterError::Corrupt(_) | RouterError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
                };
                (s, e.code())
            }
            Self::Rw(e) => {
                use strata_rwstore::RwError as R;
                match e {
                    R::Obsolete { .. } | R::ObsoleteElsewhere(_) => (StatusCode::CONFLICT, "ObsoleteVersion"),
                    R::InsufficientReplicas { .. } | R::UnavailableElsewhere(_) => (StatusCode::SERVICE_UNAVAILABLE, "InsufficientReplicas"),
                    R::NoSuchStore(_) => (StatusCode::NOT_FOUND, "NoSuchStore"),
                    R::Clock(_) => (StatusCode::BAD_REQUEST, "InvalidClock"),
                    R::Invalid(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
                    R::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "ValueTooLarge"),
                    R::UnknownTransform(_) => (StatusCode::BAD_REQUEST, "UnknownTransform"),
                    R::Transform { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "TransformFailed"),
                    R::Corrupt { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "StoredVersionDamaged"),
                    // Within the store's limit but over this node's record limit
                    // (`--chunk-size` plus 1 MiB): still the value's size.
                    R::Engine(strata_engine::EngineError::TooLarge { .. }) => (StatusCode::PAYLOAD_TOO_LARGE, "ValueTooLarge"),
                    R::Engine(_) => (StatusCode::INTERNAL_SERVER_ERROR, "StorageError"),
                    R::Unreachable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "NodeUnreachable"),
                }
            }
            Self::Tract(e) => {
                use strata_tract::TractError as T;
                match e {
                    T::NoTable => (StatusCode::NOT_FOUND, "NoTractTable"),
                    T::StaleRow { .. } => (StatusCode::CONFLICT, "StaleRow"),
                    T::NotHere(_) => (StatusCode::MISDIRECTED_REQUEST, "NotHere"),
                    T::NotPrimary(_) => (StatusCode::MISDIRECTED_REQUEST, "NotPrimary"),
                    T::NoSuchBlob(_) => (StatusCode::NOT_FOUND, "NoSuchBlob"),
                    T::BlobExists(_) => (StatusCode::CONFLICT, "BlobExists"),
                    T::OutOfRange { .. } => (StatusCode::RANGE_NOT_SATISFIABLE, "TractOutOfRange"),
                    T::Filling(_) => (StatusCode::SERVICE_UNAVAILABLE, "Filling"),
                    T::NotFound { .. } => (StatusCode::NOT_FOUND, "NoSuchTract"),
                    T::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "TractTooLarge"),
                    T::Invalid(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
                    T::Engine(strata_engine::EngineError::ReadOnly { .. }) => (StatusCode::INSUFFICIENT_STORAGE, "PartitionReadOnly"),
                    T::Engine(strata_engine::EngineError::Busy { .. }) => (StatusCode::SERVICE_UNAVAILABLE, "Busy"),
                    T::Engine(_) => (StatusCode::INTERNAL_SERVER_ERROR, "StorageError"),
                    T::Unreachable { .. } => (StatusCode::SERVICE_UNAVAILABLE, "NodeUnreachable"),
                    T::Remote { .. } => (StatusCode::BAD_GATEWAY, "RemoteError"),
                }
            }
            Self::Txn(e) => {
                use strata_txn::TxnError as T;
                let status = match e {
                    T::Conflict(_) => StatusCode::CONFLICT,
                    T::Unknown(_) => StatusCode::GATEWAY_TIMEOUT,
                    T::SnapshotTooOld { .. } => StatusCode::GONE,
                    T::NoTable => StatusCode::NOT_FOUND,
                    T::StaleRow { .. } => StatusCode::CONFLICT,
                    T::NotPrimary(_) | T::NotHere(_) => StatusCode::MISDIRECTED_REQUEST,
                    T::Invalid(_) => StatusCode::BAD_REQUEST,
                    T::Unreachable { .. } => StatusCode::SERVICE_UNAVAILABLE,
                    T::Engine(strata_engine::EngineError::ReadOnly { .. }) => StatusCode::INSUFFICIENT_STORAGE,
                    T::Engine(strata_engine::EngineError::Busy { .. }) => StatusCode::SERVICE_UNAVAILABLE,
                    T::Engine(_) | T::Corrupt(_) => StatusCode::INTERNAL_SERVER_ERROR,
                };
                (status, e.code())
            }
            Self::NoSuchTxn(_) => (StatusCode::NOT_FOUND, "NoSuchTxn"),
            Self::BadId(_) => (StatusCode::BAD_REQUEST, "InvalidBlobId"),
            Self::BadHeader { .. } => (StatusCode::BAD_REQUEST, "InvalidHeader"),
            Self::MetadataTooLarge { .. } => (StatusCode::BAD_REQUEST, "MetadataTooLarge"),
            Self::BadRange(_) => (StatusCode::RANGE_NOT_SATISFIABLE, "InvalidRange"),
            Self::NoSuchPartition(_) => (StatusCode::NOT_FOUND, "NoSuchPartition"),
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, "BadRequest"),
            Self::NoSuchStore(_) => (StatusCode::NOT_FOUND, "NoSuchStore"),
            Self::NoSuchEventTarget(_) => (StatusCode::NOT_FOUND, "NoSuchEventTarget"),
            Self::EventTargetInUse { .. } => (StatusCode::CONFLICT, "EventTargetInUse"),
            Self::NoSuchKey(_) => (StatusCode::NOT_FOUND, "NoSuchKey"),
            Self::StoreExists(_) => (StatusCode::CONFLICT, "StoreExists"),
            Self::Kv(strata_kv::VersionError::Io { .. }) => (StatusCode::INTERNAL_SERVER_ERROR, "StoreIoError"),
            Self::Kv(_) => (StatusCode::UNPROCESSABLE_ENTITY, "VersionRejected"),
            Self::FetchFailed(_) => (StatusCode::BAD_GATEWAY, "FetchFailed"),
            Self::NotOwned { .. } => (StatusCode::MISDIRECTED_REQUEST, "NotOwned"),
            Self::VersionBehind { .. } => (StatusCode::SERVICE_UNAVAILABLE, "VersionBehind"),
            Self::NotClustered => (StatusCode::NOT_FOUND, "NotClustered"),
            Self::NoS3 => (StatusCode::NOT_FOUND, "NoS3"),
            Self::ScrubRunning => (StatusCode::CONFLICT, "ScrubRunning"),
            Self::SweepRunning => (StatusCode::CONFLICT, "SweepRunning"),
            Self::Names(e) => {
                use strata_names::NameError as N;
                match e {
                    N::NoSuchBucket(_) => (StatusCode::NOT_FOUND, "NoSuchBucket"),
                    N::NoSuchAccessKey(_) => (StatusCode::NOT_FOUND, "NoSuchAccessKey"),
                    N::AccessKeyExists(_) => (StatusCode::CONFLICT, "AccessKeyExists"),
                    N::BucketExists { .. } => (StatusCode::CONFLICT, "BucketAlreadyExists"),
                    N::BucketNotEmpty(_) => (StatusCode::CONFLICT, "BucketNotEmpty"),
                    N::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "NamesUnavailable"),
                    N::NoSuchKey { .. } => (StatusCode::NOT_FOUND, "NoSuchKey"),
                    N::NoSuchUpload(_) => (StatusCode::NOT_FOUND, "NoSuchUpload"),
                    N::PreconditionFailed(_) => (StatusCode::PRECONDITION_FAILED, "PreconditionFailed"),
                    N::InvalidPart(_) => (StatusCode::BAD_REQUEST, "InvalidPart"),
                    N::KeyTooLong(_) => (StatusCode::BAD_REQUEST, "KeyTooLongError"),
                    N::InvalidName(_) => (StatusCode::BAD_REQUEST, "InvalidName"),
                    N::ContainerExists(_) => (StatusCode::CONFLICT, "ContainerExists"),
                    N::NoSuchContainer(_) => (StatusCode::NOT_FOUND, "NoSuchContainer"),
                    N::KmsKeyExists(_) => (StatusCode::CONFLICT, "KmsKeyExists"),
                    N::NoSuchKmsKey(_) => (StatusCode::NOT_FOUND, "NoSuchKmsKey"),
                    N::ObjectLocked(_) => (StatusCode::FORBIDDEN, "ObjectLocked"),
                    N::InvalidBucketState(_) => (StatusCode::CONFLICT, "InvalidBucketState"),
                }
            }
            Self::NotAMetadataMember => (StatusCode::BAD_REQUEST, "NotAMetadataMember"),
            Self::AlreadyInitialized => (StatusCode::CONFLICT, "AlreadyInitialized"),
            Self::MetaUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "MetaUnavailable"),
            Self::ClusterRefused(_) => (StatusCode::CONFLICT, "ClusterRefused"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
            Self::Unauthenticated => (StatusCode::UNAUTHORIZED, "AuthenticationRequired"),
            Self::Signature(e) => {
                use strata_auth::SigError as E;
                let s = match e {
                    E::Malformed { .. }
                    | E::Algorithm(_)
                    | E::Region { .. }
                    | E::Service { .. }
                    | E::ExpiresOutOfRange(_)
                    | E::UnsignedHeader(_)
                    | E::PayloadHashRequired => StatusCode::BAD_REQUEST,
                    E::Skewed { .. } | E::Expired { .. } | E::Mismatch => StatusCode::FORBIDDEN,
                };
                (s, e.code())
            }
            Self::Denied(d) => {
                use strata_names::Denied as D;
                let code = match d {
                    D::NoSuchKey(_) => "InvalidAccessKeyId",
                    D::Expired { .. } => "ExpiredToken",
                    D::Missing { .. } => "AccessDenied",
                };
                (StatusCode::FORBIDDEN, code)
            }
            Self::NodesOnly => (StatusCode::FORBIDDEN, "NodesOnly"),
            Self::BodyTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "BodyTooLarge"),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_code();
        let body = serde_json::json!({ "code": code, "message": self.to_string() });
        let mut resp = (status, Json(body)).into_response();
        if let Self::Router(RouterError::InvalidRange { size }) = &self
            && let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}"))
        {
            resp.headers_mut().insert(header::CONTENT_RANGE, v);
        }
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("AWS4-HMAC-SHA256"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

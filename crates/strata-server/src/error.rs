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
    /// An internal failure outside the router.
    #[error("internal error: {0}")]
    Internal(String),
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
                    RouterError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
                };
                (s, e.code())
            }
            Self::BadId(_) => (StatusCode::BAD_REQUEST, "InvalidBlobId"),
            Self::BadHeader { .. } => (StatusCode::BAD_REQUEST, "InvalidHeader"),
            Self::MetadataTooLarge { .. } => (StatusCode::BAD_REQUEST, "MetadataTooLarge"),
            Self::BadRange(_) => (StatusCode::RANGE_NOT_SATISFIABLE, "InvalidRange"),
            Self::NoSuchPartition(_) => (StatusCode::NOT_FOUND, "NoSuchPartition"),
            Self::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
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
        if status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

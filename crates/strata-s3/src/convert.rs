//! Mapping between Strata's types and S3's: errors (once, here), times,
//! metadata and URL-encoded listings.

use s3s::dto::Timestamp;
use s3s::{S3Error, S3ErrorCode, s3_error};
use std::time::{Duration, UNIX_EPOCH};
use strata_names::NameError;
use strata_router::RouterError;

/// A name-index error as S3 reports it.
pub(crate) fn name_err(e: NameError) -> S3Error {
    let msg = e.to_string();
    let code = match e {
        NameError::NoSuchBucket(_) => S3ErrorCode::NoSuchBucket,
        NameError::BucketExists { yours: true, .. } => S3ErrorCode::BucketAlreadyOwnedByYou,
        NameError::BucketExists { yours: false, .. } => S3ErrorCode::BucketAlreadyExists,
        NameError::BucketNotEmpty(_) => S3ErrorCode::BucketNotEmpty,
        NameError::NoSuchKey { .. } => S3ErrorCode::NoSuchKey,
        NameError::NoSuchUpload(_) => S3ErrorCode::NoSuchUpload,
        NameError::PreconditionFailed(_) => S3ErrorCode::PreconditionFailed,
        NameError::InvalidPart(_) => S3ErrorCode::InvalidPart,
        NameError::KeyTooLong(_) => S3ErrorCode::KeyTooLongError,
        NameError::NoSuchAccessKey(_) => S3ErrorCode::InvalidAccessKeyId,
        NameError::AccessKeyExists(_) => S3ErrorCode::InvalidArgument,
        NameError::Unavailable(_) => S3ErrorCode::ServiceUnavailable,
        // Containers are the native API's; S3 never names one.
        NameError::InvalidName(_) | NameError::ContainerExists(_) | NameError::NoSuchContainer(_) => S3ErrorCode::InvalidArgument,
        NameError::KmsKeyExists(_) => S3ErrorCode::InvalidArgument,
        // S3 refuses a delete or change that object lock forbids so.
        NameError::ObjectLocked(_) => S3ErrorCode::AccessDenied,
        NameError::InvalidBucketState(_) => S3ErrorCode::InvalidBucketState,
        // S3 answers an SSE-KMS request naming an unknown key so, with 400.
        NameError::NoSuchKmsKey(_) => {
            let mut e = S3Error::with_message(S3ErrorCode::Custom("KMS.NotFoundException".into()), msg);
            e.set_status_code(http::StatusCode::BAD_REQUEST);
            return e;
        }
    };
    S3Error::with_message(code, msg)
}

/// A router error as S3 reports it.
pub(crate) fn router_err(e: RouterError) -> S3Error {
    let msg = e.to_string();
    let code = match e {
        RouterError::NotFound | RouterError::Deleted | RouterError::Expired => S3ErrorCode::NoSuchKey,
        RouterError::InvalidRange { .. } => S3ErrorCode::InvalidRange,
        RouterError::TooLarge { .. } => S3ErrorCode::EntityTooLarge,
        RouterError::BadRequest(_) => S3ErrorCode::InvalidRequest,
        RouterError::IncompleteBody(_) => S3ErrorCode::IncompleteBody,
        // Full storage answers 507 as on the native API (S3 has no code
        // of its own for it; MinIO answers 507 too).
        RouterError::NoWritablePartition | RouterError::PartitionReadOnly(_) => {
            let mut err = S3Error::with_message(S3ErrorCode::Custom("InsufficientStorage".into()), "no writable partition: storage is full or read-only");
            err.set_status_code(http::StatusCode::INSUFFICIENT_STORAGE);
            return err;
        }
        RouterError::Unavailable(_) => S3ErrorCode::ServiceUnavailable,
        RouterError::TooSlow(_) => S3ErrorCode::RequestTimeout,
        // A blob whose every copy is damaged, an id naming no partition, an
        // id collision that retries did not resolve, or another failure.
        RouterError::Corrupt(_) | RouterError::NoSuchPartition(_) | RouterError::AlreadyExists | RouterError::Internal(_) => S3ErrorCode::InternalError,
    };
    S3Error::with_message(code, msg)
}

/// Milliseconds since the epoch as an S3 timestamp.
pub(crate) fn ts(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

/// The `x-amz-expiration` value for an object expiring at `expiry_ms`
/// (None if it never does).
pub(crate) fn expiration(expiry_ms: u64) -> Option<String> {
    if expiry_ms == 0 {
        return None;
    }
    let mut date = Vec::new();
    ts(expiry_ms).format(s3s::dto::TimestampFormat::HttpDate, &mut date).ok()?;
    Some(format!("expiry-date=\"{}\", rule-id=\"lifecycle\"", String::from_utf8_lossy(&date)))
}

/// An S3 timestamp in milliseconds since the epoch (0 before it).
pub(crate) fn ms(t: &Timestamp) -> u64 {
    let odt = time::OffsetDateTime::from(t.clone());
    u64::try_from(odt.unix_timestamp_nanos() / 1_000_000).unwrap_or(0)
}

/// Checks an object key: not empty, at most 1024 bytes.
pub(crate) fn check_key(key: &str) -> Result<(), S3Error> {
    if key.is_empty() {
        return Err(s3_error!(InvalidArgument, "the object key is empty"));
    }
    if key.len() > strata_names::KEY_BYTES_MAX {
        return Err(s3_error!(KeyTooLongError, "the object key is {} bytes; at most 1024 are allowed", key.len()));
    }
    Ok(())
}

/// Whether an object metadata name is Strata's own (stored checksums,
/// `/checksum-*`; tags, `/tag:*`), not the user's. Such names start with
/// `/`, which no header name can contain, and are never shown as
/// `x-amz-meta-*`.
pub(crate) fn is_internal(name: &str) -> bool {
    name.starts_with('/')
}

/// `x-amz-meta-*` as stored: names lower-cased, sorted.
pub(crate) fn meta_in(m: Option<s3s::dto::Metadata>) -> Vec<(String, String)> {
    let mut v: Vec<_> = m.unwrap_or_default().into_iter().map(|(k, v)| (k.to_ascii_lowercase(), v)).filter(|(k, _)| !is_internal(k)).collect();
    v.sort();
    v
}

/// Stored metadata for a response.
pub(crate) fn meta_out(m: &[(String, String)]) -> Option<s3s::dto::Metadata> {
    let user: s3s::dto::Metadata = m.iter().filter(|(k, _)| !is_internal(k)).cloned().collect();
    if user.is_empty() { None } else { Some(user) }
}

/// The content type to store: the client's, or S3's default.
pub(crate) fn content_type_in(c: Option<String>) -> String {
    c.filter(|c| !c.is_empty()).unwrap_or_else(|| "binary/octet-stream".into())
}

/// Percent-encodes a key for `encoding-type=url` listings (unreserved
/// characters and `/` kept).
pub(crate) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A quoted-less strong ETag for s3s.
pub(crate) fn etag(s: &str) -> s3s::dto::ETag {
    s3s::dto::ETag::Strong(s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_names_never_pass_as_user_metadata() {
        let given: s3s::dto::Metadata = [("Color".to_owned(), "blue".to_owned()), ("/checksum-sha256".to_owned(), "forged".to_owned())].into();
        let stored = meta_in(Some(given));
        assert_eq!(stored, [("color".to_owned(), "blue".to_owned())]);
        let mut with_sum = stored.clone();
        with_sum.push(("/checksum-crc32".to_owned(), "NhCmhg==".to_owned()));
        assert_eq!(meta_out(&with_sum), Some([("color".to_owned(), "blue".to_owned())].into()));
        assert_eq!(meta_out(&[("/checksum-crc32".to_owned(), "x".to_owned())]), None);
        assert!(is_internal("/tag:project") && !is_internal("color"));
    }

    /// Full storage is 507 on S3 as on the native API (it was a 500
    /// InternalError "partition 2 is read-only"); damage is a 500 that says so.
    #[test]
    fn router_errors_map_to_the_statuses_of_the_native_api() {
        for e in [RouterError::NoWritablePartition, RouterError::PartitionReadOnly(2)] {
            let s3 = router_err(e);
            assert_eq!(s3.status_code(), Some(http::StatusCode::INSUFFICIENT_STORAGE));
            assert_eq!(s3.code().as_str(), "InsufficientStorage");
        }
        let corrupt = router_err(RouterError::Corrupt("every copy is damaged".into()));
        assert_eq!(corrupt.code(), &S3ErrorCode::InternalError);
        assert!(corrupt.message().is_some_and(|m| m.contains("corrupt")));
        assert_eq!(router_err(RouterError::Deleted).code(), &S3ErrorCode::NoSuchKey);
    }

    /// Every router error has its S3 status: losing a quorum is 503, a full
    /// partition 507, never the 500 of an unlisted error.
    #[test]
    fn every_router_error_has_its_s3_status() {
        use strata_router::Unavailable as U;
        let quorum = || U::QuorumNotMet { partition: 1, needed: 2, acks: 1, failures: vec![strata_router::ReplicaError::Unreachable("node 2 down".into())] };
        let cases: Vec<(RouterError, u16)> = vec![
            (RouterError::NotFound, 404),
            (RouterError::Deleted, 404),
            (RouterError::Expired, 404),
            (RouterError::InvalidRange { size: 3 }, 416),
            (RouterError::TooLarge { size: 9, max: 8 }, 400),
            (RouterError::BadRequest("x".into()), 400),
            (RouterError::IncompleteBody("x".into()), 400),
            (RouterError::AlreadyExists, 500),
            (RouterError::NoWritablePartition, 507),
            (RouterError::PartitionReadOnly(2), 507),
            (RouterError::NoSuchPartition(9), 500),
            (quorum().into(), 503),
            (U::PolicyExceedsReplicas { partition: 1, policy: "count:4".into(), needed: 4, replicas: 3 }.into(), 503),
            (U::TooFewReachable { partition: 1, policy: "all".into(), needed: 3, reachable: 2, replicas: 3 }.into(), 503),
            (U::NoLocalReplica { partition: 1 }.into(), 503),
            (U::NoReplicaAnswered { partition: 1, failures: Vec::new() }.into(), 503),
            (U::NotAllListable { partition: 1, listable: 2, replicas: 3 }.into(), 503),
            (U::ListingFailed { partition: 1, failure: strata_router::ReplicaError::Unreachable("x".into()) }.into(), 503),
            (U::IoFailed { partition: 1 }.into(), 503),
            (U::Overloaded { partition: 1 }.into(), 503),
            (U::ShuttingDown.into(), 503),
            (U::Chunk { chunk: "AAAA".into(), cause: Box::new(quorum()) }.into(), 503),
            (RouterError::Corrupt("x".into()), 500),
            (RouterError::TooSlow("x".into()), 400),
            (RouterError::Internal("x".into()), 500),
        ];
        for (e, want) in cases {
            let what = format!("{e:?}");
            let s3 = router_err(e);
            let status = s3.status_code().or_else(|| s3.code().status_code()).map(|s| s.as_u16());
            assert_eq!(status, Some(want), "{what}: {:?}", s3.code());
        }
    }

    #[test]
    fn conversions_round_trip() {
        assert_eq!(ms(&ts(1_700_000_000_123)), 1_700_000_000_123);
        assert_eq!(url_encode("a b/ü+%"), "a%20b/%C3%BC%2B%25");
        assert!(check_key(&"k".repeat(1024)).is_ok());
        assert!(check_key(&"k".repeat(1025)).is_err());
        assert!(check_key("").is_err());
        assert_eq!(expiration(1_700_000_000_000).as_deref(), Some("expiry-date=\"Tue, 14 Nov 2023 22:13:20 GMT\", rule-id=\"lifecycle\""));
        assert_eq!(expiration(0), None);
    }
}

//! Strata's S3 API, on `s3s`: the protocol (routing, XML, SigV4 headers,
//! presigned URLs and streaming payloads) is the crate's; what this crate
//! adds is Strata's own: buckets and object names from the name index
//! (`strata-names`), bytes in blobs through the router, multipart uploads
//! completed by stitching the parts' chunks into one composite blob (no
//! copy), lifecycle expiration mapped onto blob TTLs, and access keys with
//! per-bucket grants.
//!
//! A leaf crate: only the `strata` binary (and `strata-fuzz`, for the
//! parsers in [`fuzz`]) depends on it, so the rest of the workspace builds
//! without `s3s`.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-names, strata-router, strata-sse, strata-events; never the
//! engine, the node crate, the server, or the CLI.

mod access;
mod acl;
mod cause;
mod checksum;
mod convert;
mod cors;
mod headers;
mod md5x;
mod policy;

/// The `md-5` crate's MD5 throughput over one stream, the baseline for benchmarks.
pub use md5x::crate_throughput as md5_crate_throughput;
/// MD5 throughput, for benchmarks: see [`md5x::throughput`].
pub use md5x::throughput as md5_throughput;
mod ops;
mod request_id;
mod sse;
pub use sse::SSE_S3_KEY;
mod store;
#[cfg(test)]
mod sweep_model;
mod tags;

/// The parsers of untrusted text this crate writes itself (s3s parses the
/// rest), for the fuzz targets in `strata-fuzz`.
#[doc(hidden)]
pub mod fuzz {
    /// The credential scope of a request with these headers and query, checked against `us-east-1`.
    pub fn scope(headers: &http::HeaderMap, query: Option<&str>) {
        if let Some(s) = crate::access::scope_of(headers, query) {
            let _ = crate::access::check_scope(&s, "us-east-1");
        }
    }
    /// An `x-amz-tagging` header.
    pub fn tagging(header: &str) {
        let _ = crate::tags::from_header(Some(header));
    }
}

pub use access::{KeyAccess, KeyAuth, VirtualHosts};

use futures_util::StreamExt;
use s3s::service::S3ServiceBuilder;
use std::sync::Arc;
use std::time::Duration;
use strata_names::NameIndex;
use strata_router::Router;
use strata_types::Clock;

/// Called once per S3 operation with its name, status and seconds taken
/// (the server turns it into Prometheus metrics).
pub type Observer = Arc<dyn Fn(&'static str, u16, f64) + Send + Sync>;

/// S3 settings.
#[derive(Debug, Clone)]
pub struct S3Options {
    /// Region reported to clients.
    pub region: String,
    /// Base domains for virtual-host-style requests (`bucket.DOMAIN`);
    /// any other host is path-style.
    pub domains: Vec<String>,
    /// Smallest part but the last of a multipart upload (S3: 5 MiB).
    pub min_part_bytes: u64,
    /// The root key that opens the key store's keys (SSE-S3 and SSE-KMS
    /// are refused without one; SSE-C needs none).
    pub kms_root: Option<strata_sse::Key>,
}

impl Default for S3Options {
    fn default() -> Self {
        Self { region: "us-east-1".into(), domains: vec![], min_part_bytes: 5 << 20, kms_root: None }
    }
}

/// The S3 implementation over a router and a name index.
pub struct StrataS3 {
    router: Arc<Router>,
    names: Arc<dyn NameIndex>,
    clock: Arc<dyn Clock>,
    opts: S3Options,
    observer: Option<Observer>,
}

impl StrataS3 {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }
}

pub use request_id::S3Endpoint;

/// Builds the S3 service: the implementation, SigV4 against the name
/// index's access keys, grants and public buckets, virtual hosts, and
/// request ids on every answer.
pub fn service(router: Arc<Router>, names: Arc<dyn NameIndex>, clock: Arc<dyn Clock>, opts: S3Options, observer: Option<Observer>) -> S3Endpoint {
    let domains = opts.domains.clone();
    let region = opts.region.clone();
    // The S3 API's own name ops carry their request's access key and time
    // (change capture's events say who and when).
    let attributed: Arc<dyn NameIndex> = Arc::new(cause::Attributed::new(names.clone(), clock.clone()));
    let s3 = StrataS3 { router, names: attributed, clock: clock.clone(), opts, observer };
    let mut b = S3ServiceBuilder::new(s3);
    b.set_auth(KeyAuth::new(names.clone()));
    b.set_access(KeyAccess::new(names.clone(), region, clock));
    b.set_host(VirtualHosts::new(domains.clone()));
    S3Endpoint::new(b.build(), names, domains)
}

/// Removes the names of expired objects every `period` and frees their
/// blobs; runs until the process ends. A blob's TTL normally matches its
/// name's expiry, so the engine has dropped it already; freeing it here
/// too covers a blob left with a later expiry (a lifecycle change cut
/// short), which would otherwise outlive every name.
pub fn spawn_expiry_sweeper(router: Arc<Router>, names: Arc<dyn NameIndex>, clock: Arc<dyn Clock>, period: Duration) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(period).await;
            if let Err(e) = sweep_expired(&router, &*names, clock.now_ms()).await {
                tracing::warn!(error = %e, "could not remove expired names");
            }
        }
    });
}

/// Expired names a sweep removes at once.
const SWEEP_IN_FLIGHT: usize = 32;

/// Removes the names of objects expired at `now_ms` (at most 10,000 per
/// call), each only if it still names the expired blob, and frees the
/// blobs of the names it removed; returns how many it removed.
pub async fn sweep_expired(router: &Router, names: &dyn NameIndex, now_ms: u64) -> Result<usize, strata_names::NameError> {
    let expired: Vec<_> = strata_names::read(names, |s| {
        s.buckets
            .iter()
            .flat_map(|(b, bucket)| bucket.objects.iter().filter(|(_, o)| o.expired(now_ms)).map(move |(k, o)| (b.clone(), k.clone(), o.blob)))
            .take(10_000)
            .collect()
    });
    // A few at a time, so the name ops and blob deletes share fsyncs.
    let outcomes: Vec<Result<bool, strata_names::NameError>> = futures_util::stream::iter(expired)
        .map(|(bucket, key, blob)| async move {
            // Only the sweep whose op removed the name frees the blob (on a
            // cluster every metadata member sweeps).
            let op = strata_names::NameOp::DeleteObject { bucket, key, blob: Some(blob) };
            let op = strata_names::NameOp::As { who: None, kind: Some("s3:LifecycleExpiration:Delete".into()), now_ms, op: Box::new(op) };
            if names.apply(op).await?.replaced.is_none() {
                return Ok(false);
            }
            match router.delete(blob).await {
                Ok(()) | Err(strata_router::RouterError::NotFound | strata_router::RouterError::Deleted | strata_router::RouterError::Expired) => {}
                Err(e) => tracing::warn!(%blob, error = %e, "could not free the blob of an expired object"),
            }
            Ok(true)
        })
        .buffer_unordered(SWEEP_IN_FLIGHT)
        .collect()
        .await;
    let mut removed = 0;
    for o in outcomes {
        removed += usize::from(o?);
    }
    Ok(removed + expire_versioned(router, names, now_ms).await?)
}

/// Lifecycle expiration in versioned buckets, as S3 does it: a current
/// version whose rule says it has expired becomes noncurrent behind a new
/// delete marker (its bytes stay, readable by version id, until that
/// version is deleted). At most 10,000 per call; returns how many.
async fn expire_versioned(router: &Router, names: &dyn NameIndex, now_ms: u64) -> Result<usize, strata_names::NameError> {
    let due: Vec<(String, String, String)> = strata_names::read(names, |s| {
        s.versioning
            .keys()
            .filter_map(|b| s.buckets.get(b).map(|bucket| (b, bucket)))
            .filter(|(_, bucket)| bucket.lifecycle.iter().any(|r| r.enabled))
            .flat_map(|(b, bucket)| {
                bucket
                    .objects
                    .iter()
                    .filter(move |(k, o)| matches!(bucket.expiry_for(k, o.modified_ms), e if e != 0 && e <= now_ms))
                    .map(move |(k, o)| (b.clone(), k.clone(), strata_names::version_id(o).to_owned()))
            })
            .take(10_000)
            .collect()
    });
    let mut expired = 0;
    for (bucket, key, version_id) in due {
        let op = strata_names::NameOp::ExpireVersioned { bucket, key, version_id, marker_id: ops::new_version_id(), now_ms };
        // A suspended bucket's null version goes, as a DELETE there takes it.
        if let Some(freed) = names.apply(op).await?.replaced {
            match router.delete(freed.blob).await {
                Ok(()) | Err(strata_router::RouterError::NotFound | strata_router::RouterError::Deleted | strata_router::RouterError::Expired) => {}
                Err(e) => tracing::warn!(blob = %freed.blob, error = %e, "could not free the blob of an expired null version"),
            }
        }
        expired += 1;
    }
    Ok(expired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_names::{EmbeddedIndex, NameOp, ObjectMeta};
    use strata_types::{BlobId, BlobKind};

    fn object(n: u8, expiry_ms: u64) -> ObjectMeta {
        let blob = BlobId::from_parts(BlobKind::Simple, 0, [n; 16]);
        ObjectMeta { blob, size: 1, etag: String::new(), content_type: String::new(), meta: vec![], modified_ms: 1, expiry_ms, parts: 0 }
    }

    /// A one-node router over a fresh store, on a clock the test moves.
    fn node(dir: &std::path::Path, clock: &strata_types::ManualClock) -> Arc<Router> {
        let clock: Arc<dyn Clock> = Arc::new(clock.clone());
        let store = Arc::new(strata_engine::Store::open(&dir.join("data"), strata_engine::EngineConfig::default(), clock.clone()).unwrap());
        store.create_replica(0).unwrap();
        Arc::new(Router::new(Arc::new(strata_router::LocalView::new(store)), strata_router::RouterConfig::default(), clock, None))
    }

    /// Writes a blob expiring at `expiry_ms` (0 = never) and names it.
    async fn put(router: &Arc<Router>, names: &dyn NameIndex, now: u64, key: &str, expiry_ms: u64) -> BlobId {
        let ttl_ms = (expiry_ms != 0).then(|| expiry_ms - now);
        let blob = router.put_bytes(strata_router::PutOptions { ttl_ms, ..Default::default() }, bytes::Bytes::from_static(b"data")).await.unwrap();
        let object = ObjectMeta { blob, modified_ms: now, expiry_ms, ..object(0, 0) };
        names.apply(NameOp::PutObject { bucket: "b".into(), key: key.into(), object, if_absent: false }).await.unwrap();
        blob
    }

    #[tokio::test]
    async fn the_sweeper_removes_only_expired_names_and_frees_their_blobs() {
        let dir = tempfile::tempdir().unwrap();
        let clock = strata_types::ManualClock::new(1_000);
        let router = node(dir.path(), &clock);
        let names = EmbeddedIndex::open(&dir.path().join("names")).unwrap();
        names.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).await.unwrap();
        let old = put(&router, &names, 1_000, "old", 1_100).await;
        put(&router, &names, 1_000, "forever", 0).await;
        put(&router, &names, 1_000, "later", 10_000).await;
        // A blob that outlives its name (a lifecycle change cut short).
        let outliving = put(&router, &names, 1_000, "outliving", 0).await;
        let object = ObjectMeta { blob: outliving, modified_ms: 1_000, expiry_ms: 1_200, ..object(0, 0) };
        names.apply(NameOp::PutObject { bucket: "b".into(), key: "outliving".into(), object, if_absent: false }).await.unwrap();

        assert_eq!(sweep_expired(&router, &names, 1_050).await.unwrap(), 0);
        clock.advance(1_000);
        assert_eq!(sweep_expired(&router, &names, clock.now_ms()).await.unwrap(), 2);
        let keys: Vec<String> = strata_names::read(&names, |s| s.buckets["b"].objects.keys().cloned().collect());
        assert_eq!(keys, vec!["forever", "later"]);
        assert!(matches!(router.info(old).await, Err(strata_router::RouterError::Deleted | strata_router::RouterError::Expired)));
        assert!(matches!(router.info(outliving).await, Err(strata_router::RouterError::Deleted)), "the outliving blob was not freed");
        clock.advance(20_000);
        assert_eq!(sweep_expired(&router, &names, clock.now_ms()).await.unwrap(), 1);
    }

    const DAY: u64 = 86_400_000;

    fn rule(prefix: &str, days: u32) -> strata_names::ExpiryRule {
        strata_names::ExpiryRule { id: prefix.into(), prefix: prefix.into(), enabled: true, days: Some(days), date_ms: None }
    }

    /// The S3 service over a fresh node and name index with bucket `b`, on
    /// a clock at `now` (the directory lives as long as the first value).
    async fn bucket_b(now: u64) -> (tempfile::TempDir, strata_types::ManualClock, StrataS3) {
        let dir = tempfile::tempdir().unwrap();
        let clock = strata_types::ManualClock::new(now);
        let router = node(dir.path(), &clock);
        let names: Arc<dyn NameIndex> = Arc::new(EmbeddedIndex::open(&dir.path().join("names")).unwrap());
        names.apply(NameOp::CreateBucket { name: "b".into(), owner: String::new(), now_ms: 1 }).await.unwrap();
        let s3 = StrataS3 { router, names, clock: Arc::new(clock.clone()), opts: S3Options::default(), observer: None };
        (dir, clock, s3)
    }

    #[tokio::test]
    async fn lifecycle_changes_never_leave_a_blob_expiring_before_its_name() {
        let (_dir, _, s3) = bucket_b(5 * DAY).await;
        let (now, router, names) = (5 * DAY, s3.router.clone(), s3.names.clone());
        let expiry = |blob| {
            let router = router.clone();
            async move { router.info(blob).await.unwrap().expiry_ms }
        };
        s3.set_lifecycle("b", vec![rule("logs/", 1)]).await.unwrap();
        let logs = put(&router, &*names, now, "logs/a", now + DAY).await;
        let kept = put(&router, &*names, now, "keep/x", 0).await;

        // Longer: the blob's TTL grows with the name's expiry.
        s3.set_lifecycle("b", vec![rule("logs/", 3)]).await.unwrap();
        assert_eq!(expiry(logs).await, now + 3 * DAY);
        // Shorter: it shrinks.
        s3.set_lifecycle("b", vec![rule("logs/", 2)]).await.unwrap();
        assert_eq!(expiry(logs).await, now + 2 * DAY);
        assert_eq!(expiry(kept).await, 0);

        // An object whose blob cannot be reached: removing the rules would
        // need its TTL extended first, so the change is refused whole.
        let lost = BlobId::from_parts(strata_types::BlobKind::Simple, 99, [9; 16]);
        let object = ObjectMeta { blob: lost, modified_ms: now, expiry_ms: now + 2 * DAY, ..object(0, 0) };
        names.apply(NameOp::PutObject { bucket: "b".into(), key: "logs/lost".into(), object, if_absent: false }).await.unwrap();
        let err = s3.set_lifecycle("b", vec![]).await.unwrap_err();
        assert_eq!(err.code(), &s3s::S3ErrorCode::InternalError);
        let rules = strata_names::read(&*names, |s| s.buckets["b"].lifecycle.clone());
        assert_eq!(rules, vec![rule("logs/", 2)], "a refused change must leave the rules as they were");
        // The name still expires in two days; its blob may live longer.
        let name_expiry = strata_names::read(&*names, |s| s.buckets["b"].objects["logs/a"].expiry_ms);
        assert_eq!(name_expiry, now + 2 * DAY);
        assert!(expiry(logs).await == 0 || expiry(logs).await >= name_expiry);

        // Without the unreachable object, removing the rules works.
        names.apply(NameOp::DeleteObject { bucket: "b".into(), key: "logs/lost".into(), blob: None }).await.unwrap();
        s3.set_lifecycle("b", vec![]).await.unwrap();
        assert_eq!(expiry(logs).await, 0);
        assert_eq!(strata_names::read(&*names, |s| s.buckets["b"].objects["logs/a"].expiry_ms), 0);
    }

    /// The defect this reproduces: lifecycle expiration in a versioned (or
    /// object-locked) bucket gave blobs TTLs and names expiries, so the
    /// engine dropped every version's bytes, COMPLIANCE retention or not.
    #[tokio::test]
    async fn lifecycle_expiration_in_a_versioned_bucket_keeps_every_version() {
        let (_dir, clock, s3) = bucket_b(5 * DAY).await;
        let (now, router, names) = (5 * DAY, s3.router.clone(), s3.names.clone());
        s3.set_lifecycle("b", vec![rule("logs/", 1)]).await.unwrap();
        // Written before versioning: its blob has a TTL, its name an expiry.
        let early = put(&router, &*names, now, "logs/early", now + DAY).await;
        assert_eq!(router.info(early).await.unwrap().expiry_ms, now + DAY);
        use s3s::dto::{BucketVersioningStatus, PutBucketVersioningInput, VersioningConfiguration};
        let enabled = Some(BucketVersioningStatus::from_static(BucketVersioningStatus::ENABLED));
        let enable = PutBucketVersioningInput::builder()
            .bucket("b".into())
            .versioning_configuration(VersioningConfiguration { status: enabled, ..Default::default() })
            .build()
            .unwrap();
        s3.do_put_bucket_versioning(enable).await.unwrap();
        assert_eq!(router.info(early).await.unwrap().expiry_ms, 0, "enabling versioning takes the TTL off");
        assert_eq!(strata_names::read(&*names, |s| s.buckets["b"].objects["logs/early"].expiry_ms), 0);
        // Written after: no expiry at all, and lifecycle changes give none.
        assert_eq!(s3.expiry("b", "logs/late", now).unwrap(), 0);
        s3.set_lifecycle("b", vec![rule("logs/", 2)]).await.unwrap();
        assert_eq!(strata_names::read(&*names, |s| s.buckets["b"].objects["logs/early"].expiry_ms), 0);
        let early_version = strata_names::read(&*names, |s| strata_names::version_id(&s.buckets["b"].objects["logs/early"]).to_owned());

        // Past the rule's two days the sweep adds a delete marker; the bytes stay.
        clock.advance(3 * DAY);
        assert_eq!(sweep_expired(&router, &*names, clock.now_ms()).await.unwrap(), 1);
        strata_names::read(&*names, |s| {
            assert!(!s.buckets["b"].objects.contains_key("logs/early"), "the current version is a delete marker");
            let versions = &s.versioning["b"].older["logs/early"];
            assert_eq!(versions.len(), 2);
            assert!(versions[0].object.is_none(), "newest: the marker");
            assert_eq!(versions[1].id, early_version);
        });
        assert_eq!(router.info(early).await.unwrap().expiry_ms, 0, "the version's blob is alive");
        // Sweeping again changes nothing: no second marker.
        sweep_expired(&router, &*names, clock.now_ms()).await.unwrap();
        assert_eq!(strata_names::read(&*names, |s| s.versioning["b"].older["logs/early"].len()), 2);
    }
}

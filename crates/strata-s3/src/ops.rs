//! The S3 operations.

use crate::StrataS3;
use crate::checksum::{Expected, given_checksums, with_checksums};
use crate::convert::{check_key, content_type_in, etag, expiration, meta_in, meta_out, ms, name_err, router_err, ts, url_encode};
use crate::store::Stored;
use base64::Engine;
use futures_util::StreamExt;
use md5::{Digest, Md5};
use s3s::dto::*;
use s3s::{S3, S3Error, S3Request, S3Response, S3Result, s3_error};
use std::collections::{BTreeMap, HashMap};
use strata_names::{ExpiryRule, ListQuery, NameOp, ObjectMeta, PartMeta, Upload};
use strata_router::{BlobData, ByteRange, PutOptions, RouterError};
use strata_types::BlobId;

const MAX_PARTS: u32 = 10_000;

/// Why S3 refuses `name` for a new bucket, beyond what s3s checks on every
/// path (length, characters, first and last character, `..`, IP
/// addresses, `xn--`). Only new buckets are held to these rules, so a
/// bucket named before them stays reachable.
fn new_bucket_name_problem(name: &str) -> Option<&'static str> {
    const PREFIXES: [&str; 3] = ["xn--", "sthree-", "amzn-s3-demo-"];
    const SUFFIXES: [&str; 5] = ["-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"];
    if name.contains("-.") || name.contains(".-") {
        Some("has a hyphen next to a period")
    } else if name.contains("..") {
        Some("has two periods in a row")
    } else if PREFIXES.iter().any(|p| name.starts_with(p)) {
        Some("starts with a prefix S3 reserves")
    } else if SUFFIXES.iter().any(|x| name.ends_with(x)) {
        Some("ends with a suffix S3 reserves")
    } else {
        None
    }
}

/// The owner S3 answers name (of buckets, their ACLs and listed objects):
/// Strata's objects belong to their bucket, as with S3's default
/// `BucketOwnerEnforced` ownership.
fn owner() -> Owner {
    Owner { display_name: Some(OWNER_ID.into()), id: Some(OWNER_ID.into()) }
}

/// The canonical user id of [`owner`].
pub(crate) const OWNER_ID: &str = "strata";

fn ok<T>(output: T) -> S3Result<S3Response<T>> {
    Ok(S3Response::new(output))
}

/// The copy-source conditions of a copy's input, as [`Conditions`].
macro_rules! copy_conditions {
    ($input:expr) => {
        Conditions {
            if_match: $input.copy_source_if_match,
            if_none_match: $input.copy_source_if_none_match,
            if_modified_since: $input.copy_source_if_modified_since,
            if_unmodified_since: $input.copy_source_if_unmodified_since,
        }
    };
}

/// What a name must hold for a PUT to replace it.
enum Guard {
    /// Anything, or nothing.
    None,
    /// Nothing live (`If-None-Match: *`).
    Absent,
    /// A live object with this ETag, or any live object (`If-Match`).
    Matches(Option<String>),
}

/// The conditions of GET and HEAD, checked against an object.
struct Conditions {
    if_match: Option<IfMatch>,
    if_none_match: Option<IfNoneMatch>,
    if_modified_since: Option<IfModifiedSince>,
    if_unmodified_since: Option<IfUnmodifiedSince>,
}

impl Conditions {
    fn check(&self, o: &ObjectMeta) -> Result<(), S3Error> {
        let tag = etag(&o.etag);
        let secs = o.modified_ms / 1000;
        if let Some(c) = &self.if_match
            && !c.is_any()
            && c.as_etag().is_none_or(|e| !e.strong_cmp(&tag))
        {
            return Err(s3_error!(PreconditionFailed, "If-Match does not match the ETag"));
        }
        if self.if_match.is_none()
            && let Some(t) = &self.if_unmodified_since
            && secs > ms(t) / 1000
        {
            return Err(s3_error!(PreconditionFailed, "the object was modified since If-Unmodified-Since"));
        }
        if let Some(c) = &self.if_none_match {
            if c.is_any() || c.as_etag().is_some_and(|e| e.weak_cmp(&tag)) {
                return Err(not_modified(o));
            }
        } else if let Some(t) = &self.if_modified_since
            && secs <= ms(t) / 1000
        {
            return Err(not_modified(o));
        }
        Ok(())
    }
}

/// A 304 Not Modified for `o`, with the validators a cache needs to keep
/// its copy fresh (RFC 9110 15.4.5): ETag and Last-Modified.
fn not_modified(o: &ObjectMeta) -> S3Error {
    let mut e = s3_error!(NotModified);
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", o.etag)) {
        headers.insert(http::header::ETAG, v);
    }
    let mut date = Vec::new();
    if ts(o.modified_ms).format(s3s::dto::TimestampFormat::HttpDate, &mut date).is_ok()
        && let Ok(v) = http::HeaderValue::from_bytes(&date)
    {
        headers.insert(http::header::LAST_MODIFIED, v);
    }
    e.set_headers(headers);
    e
}

/// A `Send` stream made `Sync` (as s3s's bodies must be): it is only ever
/// polled through `&mut`, so the mutex is never contended.
struct SyncStream<S>(std::sync::Mutex<S>);

impl<S> SyncStream<S> {
    fn new(s: S) -> Self {
        Self(std::sync::Mutex::new(s))
    }
}

impl<S: futures_util::Stream + Unpin> futures_util::Stream for SyncStream<S> {
    type Item = S::Item;
    fn poll_next(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<S::Item>> {
        let inner = self.get_mut().0.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner);
        std::pin::Pin::new(inner).poll_next(cx)
    }
}

/// A blob's bytes as an S3 body.
fn streaming(data: BlobData) -> StreamingBlob {
    let data = match data {
        BlobData::Whole(b, _) => futures_util::stream::once(async move { Ok::<_, strata_router::RouterError>(b) }).boxed(),
        BlobData::Stream(s) => s,
    };
    StreamingBlob::wrap(SyncStream::new(data))
}

/// A copy source's unmet conditions are PreconditionFailed, never NotModified.
/// A GetObject or HeadObject output: the fields both take from the object
/// `$o`, its stored checksums `$sums`, and the fields given.
macro_rules! object_output {
    ($out:ident { $($field:ident: $value:expr),* $(,)? }, $o:expr, $sums:expr) => {{
        let o: &ObjectMeta = $o;
        let standard = crate::headers::Standard::of(&o.meta);
        with_checksums!(
            $out {
                expires: standard.expires_out(),
                cache_control: standard.cache_control,
                content_disposition: standard.content_disposition,
                content_encoding: standard.content_encoding,
                content_language: standard.content_language,
                accept_ranges: Some("bytes".into()),
                content_type: Some(o.content_type.clone()),
                e_tag: Some(etag(&o.etag)),
                last_modified: Some(ts(o.modified_ms)),
                metadata: meta_out(&o.meta),
                parts_count: (o.parts > 0).then_some(o.parts as i32),
                expiration: expiration(o.expiry_ms),
                $($field: $value,)*
            },
            $sums
        )
    }};
}

/// The checksums stored with `o`, if the request asked for them.
fn stored_checksums(mode: Option<&s3s::dto::ChecksumMode>, o: &ObjectMeta) -> s3s::dto::Checksum {
    match mode {
        Some(m) if m.as_str() == s3s::dto::ChecksumMode::ENABLED => crate::checksum::from_meta(&o.meta),
        _ => Default::default(),
    }
}

fn unmet_copy_condition(e: S3Error) -> S3Error {
    if *e.code() == s3s::S3ErrorCode::NotModified { s3_error!(PreconditionFailed) } else { e }
}

/// A part number, 1 to 10,000.
fn part_number(n: i32) -> Result<u32, S3Error> {
    u32::try_from(n).ok().filter(|n| (1..=MAX_PARTS).contains(n)).ok_or_else(|| s3_error!(InvalidArgument, "part number {n} is not between 1 and 10000"))
}

/// `x-amz-copy-source-range`: `bytes=first-last`, both given, first <= last.
fn copy_range(r: &str) -> Result<ByteRange, S3Error> {
    let bad = || s3_error!(InvalidArgument, "x-amz-copy-source-range {r:?} is not bytes=first-last");
    let (first, last) = r.strip_prefix("bytes=").and_then(|r| r.split_once('-')).ok_or_else(bad)?;
    let (first, last) = (first.trim().parse::<u64>().map_err(|_| bad())?, last.trim().parse::<u64>().map_err(|_| bad())?);
    if first > last {
        return Err(bad());
    }
    Ok(ByteRange::FromTo(first, last))
}

// After the macros above, which the submodules use.
mod acl;
mod attributes;
mod lifecycle;
mod listing;
mod multipart;
mod notify;
pub(crate) use multipart::part_sizes;
mod bucket_config;
mod lock;
mod reads;
mod versioning;
pub(crate) use versioning::new_version_id;
mod writes;
use lifecycle::{rule_out, rules_in};

impl StrataS3 {
    fn observe<T>(&self, op: &'static str, t0: std::time::Instant, r: &S3Result<T>) {
        if let Some(obs) = &self.observer {
            let status = match r {
                Ok(_) => 200,
                Err(e) => e.status_code().map_or(500, |s| s.as_u16()),
            };
            obs(op, status, t0.elapsed().as_secs_f64());
        }
    }

    /// The live object, or NoSuchBucket / NoSuchKey.
    fn object(&self, bucket: &str, key: &str) -> Result<ObjectMeta, S3Error> {
        let now = self.now_ms();
        strata_names::read(&*self.names, |s| {
            let b = s.bucket(bucket).map_err(name_err)?;
            b.object(key, now).cloned().ok_or_else(|| s3_error!(NoSuchKey, "no object {key:?} in bucket {bucket:?}"))
        })
    }

    /// Lifecycle expiry for a new object, checking that the bucket exists.
    /// When an object written now to `bucket` as `key` expires (0:
    /// never), and so its blob's TTL. Never in a versioned bucket, whose
    /// versions stay until deleted: there lifecycle expiration adds a
    /// delete marker (the expiry sweeper's `ExpireVersioned`).
    pub(crate) fn expiry(&self, bucket: &str, key: &str, now: u64) -> Result<u64, S3Error> {
        strata_names::read(&*self.names, |s| s.bucket(bucket).map(|b| if s.versioning.contains_key(bucket) { 0 } else { b.expiry_for(key, now) }))
            .map_err(name_err)
    }

    fn put_opts(&self, content_type: String, meta: Vec<(String, String)>, expiry_ms: u64, now: u64) -> PutOptions {
        PutOptions {
            ttl_ms: (expiry_ms != 0).then(|| expiry_ms.saturating_sub(now).max(1)),
            content_type,
            meta,
            owner: strata_router::S3_OWNER.to_owned(),
            ..PutOptions::default()
        }
    }

    /// Names `object` if the name holds what `guard` asks; frees what it
    /// replaced, or the new blob if naming failed.
    async fn name(&self, bucket: String, key: String, object: ObjectMeta, guard: Guard, started_ms: u64) -> Result<(), S3Error> {
        let blob = object.blob;
        self.check_naming_deadline(blob, started_ms).await?;
        let op = match guard {
            Guard::None => NameOp::PutObject { bucket, key, object, if_absent: false },
            Guard::Absent => NameOp::PutObject { bucket, key, object, if_absent: true },
            Guard::Matches(etag) => NameOp::PutObjectIfMatch { bucket, key, object, etag },
        };
        match self.names.apply(op).await {
            Ok(out) => {
                self.free_outcome(out).await;
                Ok(())
            }
            Err(e) => {
                self.free(blob).await;
                Err(name_err(e))
            }
        }
    }

    /// Frees `blob` and fails if it was written too long ago to be named
    /// now (the orphan sweep may take it for an orphan).
    async fn check_naming_deadline(&self, blob: strata_types::BlobId, started_ms: u64) -> Result<(), S3Error> {
        if let Err(e) = self.router.check_naming_deadline(started_ms) {
            self.free(blob).await;
            return Err(router_err(e));
        }
        Ok(())
    }
}

/// Keys a DeleteObjects request deletes at once.
const DELETES_IN_FLIGHT: usize = 32;

/// Runs an operation after the name index's read barrier (so it sees every
/// write acknowledged anywhere before it; free on one node) and records it.
macro_rules! timed {
    ($self:ident, $op:literal, $body:expr) => {{
        let t0 = std::time::Instant::now();
        let r = match $self.names.barrier().await {
            Err(e) => Err(name_err(e)),
            Ok(()) => $body,
        };
        $self.observe($op, t0, &r);
        r
    }};
}

#[async_trait::async_trait]
impl S3 for StrataS3 {
    async fn list_buckets(&self, req: S3Request<ListBucketsInput>) -> S3Result<S3Response<ListBucketsOutput>> {
        timed!(self, "ListBuckets", {
            let who = req.credentials.map(|c| c.access_key);
            let buckets = strata_names::read(&*self.names, |s| {
                let key = who.as_deref().and_then(|w| s.keys.get(w));
                s.buckets
                    .iter()
                    .filter(|(name, _)| key.is_some_and(|k| k.admin || k.grants.contains_key(*name)))
                    .map(|(name, b)| Bucket { name: Some(name.clone()), creation_date: Some(ts(b.created_ms)), bucket_region: None })
                    .collect::<Vec<_>>()
            });
            ok(ListBucketsOutput { buckets: Some(buckets), owner: Some(owner()), ..Default::default() })
        })
    }

    async fn create_bucket(&self, req: S3Request<CreateBucketInput>) -> S3Result<S3Response<CreateBucketOutput>> {
        timed!(self, "CreateBucket", {
            let owner = req.credentials.map(|c| c.access_key).unwrap_or_default();
            let name = req.input.bucket.clone();
            if let Some(why) = new_bucket_name_problem(&name) {
                return Err(s3_error!(InvalidBucketName, "bucket name {name:?} {why}"));
            }
            let input = &req.input;
            let asked = crate::acl::Asked { canned: input.acl.as_ref().map(|a| a.as_str()), headers: crate::acl::grant_headers!(input), body: None };
            let ownership = input.object_ownership.as_ref().map(|o| acl::ownership(o.as_str())).transpose()?;
            if ownership == Some(crate::acl::ENFORCED) && asked.grants_others(true) {
                return Err(s3_error!(InvalidBucketAclWithObjectOwnership, "bucket ACLs are not allowed with object ownership BucketOwnerEnforced"));
            }
            let acl = strata_names::read(&*self.names, |s| asked.acl(true, |k| s.keys.contains_key(k)))?;
            let locked = req.input.object_lock_enabled_for_bucket == Some(true);
            match self.names.apply(NameOp::CreateBucket { name: name.clone(), owner, now_ms: self.now_ms() }).await {
                Ok(_) => {
                    if let Some(acl) = acl.filter(|a| !a.0.is_empty()) {
                        self.set_bucket_acl(name.clone(), &acl).await?;
                    }
                    if let Some(o) = ownership {
                        let op = NameOp::SetBucketDoc { bucket: name.clone(), kind: crate::acl::OWNERSHIP_DOC.to_owned(), doc: Some(o.to_owned()) };
                        self.names.apply(op).await.map_err(name_err)?;
                    }
                    // Object lock keeps versions: both are on from the start.
                    if locked {
                        self.names.apply(NameOp::SetVersioning { bucket: name.clone(), enabled: true }).await.map_err(name_err)?;
                        self.names.apply(NameOp::SetObjectLock { bucket: name.clone(), default: None }).await.map_err(name_err)?;
                    }
                    ok(CreateBucketOutput { location: Some(format!("/{name}")) })
                }
                Err(e) => Err(name_err(e)),
            }
        })
    }

    async fn delete_bucket(&self, req: S3Request<DeleteBucketInput>) -> S3Result<S3Response<DeleteBucketOutput>> {
        timed!(self, "DeleteBucket", {
            // Uploads in progress are aborted with the bucket, as S3 does.
            let out = self.names.apply(NameOp::DeleteBucketAbortingUploads { name: req.input.bucket, now_ms: self.now_ms() }).await.map_err(name_err)?;
            self.free_outcome(out).await;
            ok(DeleteBucketOutput {})
        })
    }

    async fn head_bucket(&self, req: S3Request<HeadBucketInput>) -> S3Result<S3Response<HeadBucketOutput>> {
        timed!(self, "HeadBucket", {
            strata_names::read(&*self.names, |s| s.bucket(&req.input.bucket).map(|_| ())).map_err(name_err)?;
            ok(HeadBucketOutput { bucket_region: Some(self.opts.region.clone()), ..Default::default() })
        })
    }

    async fn get_bucket_location(&self, req: S3Request<GetBucketLocationInput>) -> S3Result<S3Response<GetBucketLocationOutput>> {
        timed!(self, "GetBucketLocation", {
            strata_names::read(&*self.names, |s| s.bucket(&req.input.bucket).map(|_| ())).map_err(name_err)?;
            let region = (self.opts.region != "us-east-1").then(|| BucketLocationConstraint::from(self.opts.region.clone()));
            ok(GetBucketLocationOutput { location_constraint: region })
        })
    }

    async fn put_bucket_policy(&self, req: S3Request<PutBucketPolicyInput>) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        timed!(self, "PutBucketPolicy", self.do_put_bucket_policy(req.input).await)
    }

    async fn get_bucket_policy(&self, req: S3Request<GetBucketPolicyInput>) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        timed!(self, "GetBucketPolicy", self.do_get_bucket_policy(req.input))
    }

    async fn delete_bucket_policy(&self, req: S3Request<DeleteBucketPolicyInput>) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        timed!(self, "DeleteBucketPolicy", self.do_delete_bucket_policy(req.input).await)
    }

    async fn put_bucket_notification_configuration(
        &self,
        req: S3Request<PutBucketNotificationConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketNotificationConfigurationOutput>> {
        timed!(self, "PutBucketNotificationConfiguration", self.do_put_bucket_notification(req.input).await)
    }

    async fn get_bucket_notification_configuration(
        &self,
        req: S3Request<GetBucketNotificationConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketNotificationConfigurationOutput>> {
        timed!(self, "GetBucketNotificationConfiguration", self.do_get_bucket_notification(req.input))
    }

    async fn put_bucket_cors(&self, req: S3Request<PutBucketCorsInput>) -> S3Result<S3Response<PutBucketCorsOutput>> {
        timed!(self, "PutBucketCors", self.do_put_bucket_cors(req.input).await)
    }

    async fn get_bucket_cors(&self, req: S3Request<GetBucketCorsInput>) -> S3Result<S3Response<GetBucketCorsOutput>> {
        timed!(self, "GetBucketCors", self.do_get_bucket_cors(req.input))
    }

    async fn delete_bucket_cors(&self, req: S3Request<DeleteBucketCorsInput>) -> S3Result<S3Response<DeleteBucketCorsOutput>> {
        timed!(self, "DeleteBucketCors", self.do_delete_bucket_cors(req.input).await)
    }

    async fn put_bucket_tagging(&self, req: S3Request<PutBucketTaggingInput>) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        timed!(self, "PutBucketTagging", self.do_put_bucket_tagging(req.input).await)
    }

    async fn get_bucket_tagging(&self, req: S3Request<GetBucketTaggingInput>) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        timed!(self, "GetBucketTagging", self.do_get_bucket_tagging(req.input))
    }

    async fn delete_bucket_tagging(&self, req: S3Request<DeleteBucketTaggingInput>) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        timed!(self, "DeleteBucketTagging", self.do_delete_bucket_tagging(req.input).await)
    }

    async fn put_bucket_ownership_controls(&self, req: S3Request<PutBucketOwnershipControlsInput>) -> S3Result<S3Response<PutBucketOwnershipControlsOutput>> {
        timed!(self, "PutBucketOwnershipControls", self.do_put_bucket_ownership_controls(req.input).await)
    }

    async fn delete_bucket_ownership_controls(
        &self,
        req: S3Request<DeleteBucketOwnershipControlsInput>,
    ) -> S3Result<S3Response<DeleteBucketOwnershipControlsOutput>> {
        timed!(self, "DeleteBucketOwnershipControls", self.do_delete_bucket_ownership_controls(req.input).await)
    }

    async fn get_bucket_ownership_controls(&self, req: S3Request<GetBucketOwnershipControlsInput>) -> S3Result<S3Response<GetBucketOwnershipControlsOutput>> {
        timed!(self, "GetBucketOwnershipControls", self.do_get_bucket_ownership_controls(req.input))
    }

    async fn put_object_lock_configuration(&self, req: S3Request<PutObjectLockConfigurationInput>) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        timed!(self, "PutObjectLockConfiguration", self.do_put_object_lock_configuration(req.input).await)
    }

    async fn get_object_lock_configuration(&self, req: S3Request<GetObjectLockConfigurationInput>) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        timed!(self, "GetObjectLockConfiguration", self.do_get_object_lock_configuration(req.input))
    }

    async fn put_object_retention(&self, req: S3Request<PutObjectRetentionInput>) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        timed!(self, "PutObjectRetention", self.do_put_object_retention(req.input).await)
    }

    async fn get_object_retention(&self, req: S3Request<GetObjectRetentionInput>) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        timed!(self, "GetObjectRetention", self.do_get_object_retention(req.input))
    }

    async fn put_object_legal_hold(&self, req: S3Request<PutObjectLegalHoldInput>) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        timed!(self, "PutObjectLegalHold", self.do_put_object_legal_hold(req.input).await)
    }

    async fn get_object_legal_hold(&self, req: S3Request<GetObjectLegalHoldInput>) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        timed!(self, "GetObjectLegalHold", self.do_get_object_legal_hold(req.input))
    }

    async fn get_bucket_versioning(&self, req: S3Request<GetBucketVersioningInput>) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        timed!(self, "GetBucketVersioning", self.do_get_bucket_versioning(req.input))
    }

    async fn put_bucket_versioning(&self, req: S3Request<PutBucketVersioningInput>) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        timed!(self, "PutBucketVersioning", self.do_put_bucket_versioning(req.input).await)
    }

    async fn put_bucket_acl(&self, req: S3Request<PutBucketAclInput>) -> S3Result<S3Response<PutBucketAclOutput>> {
        timed!(self, "PutBucketAcl", self.do_put_bucket_acl(req.input).await)
    }

    async fn get_bucket_acl(&self, req: S3Request<GetBucketAclInput>) -> S3Result<S3Response<GetBucketAclOutput>> {
        timed!(self, "GetBucketAcl", self.do_get_bucket_acl(req.input))
    }

    async fn put_bucket_encryption(&self, req: S3Request<PutBucketEncryptionInput>) -> S3Result<S3Response<PutBucketEncryptionOutput>> {
        timed!(self, "PutBucketEncryption", self.do_put_bucket_encryption(req.input).await)
    }

    async fn get_bucket_encryption(&self, req: S3Request<GetBucketEncryptionInput>) -> S3Result<S3Response<GetBucketEncryptionOutput>> {
        timed!(self, "GetBucketEncryption", self.do_get_bucket_encryption(req.input))
    }

    async fn delete_bucket_encryption(&self, req: S3Request<DeleteBucketEncryptionInput>) -> S3Result<S3Response<DeleteBucketEncryptionOutput>> {
        timed!(self, "DeleteBucketEncryption", self.do_delete_bucket_encryption(req.input).await)
    }

    async fn put_object_acl(&self, req: S3Request<PutObjectAclInput>) -> S3Result<S3Response<PutObjectAclOutput>> {
        timed!(self, "PutObjectAcl", self.do_put_object_acl(req.input).await)
    }

    async fn get_object_acl(&self, req: S3Request<GetObjectAclInput>) -> S3Result<S3Response<GetObjectAclOutput>> {
        timed!(self, "GetObjectAcl", self.do_get_object_acl(req.input))
    }

    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        timed!(self, "PutBucketLifecycleConfiguration", {
            let rules = rules_in(req.input.lifecycle_configuration)?;
            self.set_lifecycle(&req.input.bucket, rules).await?;
            ok(PutBucketLifecycleConfigurationOutput::default())
        })
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        timed!(self, "GetBucketLifecycleConfiguration", {
            let rules = strata_names::read(&*self.names, |s| s.bucket(&req.input.bucket).map(|b| b.lifecycle.clone())).map_err(name_err)?;
            if rules.is_empty() {
                return Err(s3_error!(NoSuchLifecycleConfiguration, "bucket {} has no lifecycle rules", req.input.bucket));
            }
            ok(GetBucketLifecycleConfigurationOutput { rules: Some(rules.iter().map(rule_out).collect()), ..Default::default() })
        })
    }

    async fn delete_bucket_lifecycle(&self, req: S3Request<DeleteBucketLifecycleInput>) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        timed!(self, "DeleteBucketLifecycle", {
            self.set_lifecycle(&req.input.bucket, vec![]).await?;
            ok(DeleteBucketLifecycleOutput {})
        })
    }

    async fn put_object(&self, req: S3Request<PutObjectInput>) -> S3Result<S3Response<PutObjectOutput>> {
        timed!(self, "PutObject", self.do_put(req).await)
    }

    async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        timed!(self, "GetObject", self.do_get(req.input).await)
    }

    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
        timed!(self, "HeadObject", self.do_head(req.input).await)
    }

    async fn get_object_attributes(&self, req: S3Request<GetObjectAttributesInput>) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        timed!(self, "GetObjectAttributes", self.do_get_object_attributes(req.input))
    }

    async fn delete_object(&self, req: S3Request<DeleteObjectInput>) -> S3Result<S3Response<DeleteObjectOutput>> {
        timed!(self, "DeleteObject", {
            let i = req.input;
            if i.if_match.is_some() || i.if_match_size.is_some() || i.if_match_last_modified_time.is_some() {
                if i.version_id.is_some() {
                    return Err(s3_error!(NotImplemented, "conditions on the delete of one version are not supported"));
                }
                self.delete_if(&i).await?;
                return ok(DeleteObjectOutput::default());
            }
            let d = self.delete_key(&i.bucket, &i.key, i.version_id.as_deref(), i.bypass_governance_retention == Some(true)).await?;
            ok(DeleteObjectOutput { delete_marker: d.marker.then_some(true), version_id: d.version_id, ..Default::default() })
        })
    }

    async fn get_object_tagging(&self, req: S3Request<GetObjectTaggingInput>) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        timed!(self, "GetObjectTagging", {
            let o = self.object(&req.input.bucket, &req.input.key)?;
            ok(GetObjectTaggingOutput { tag_set: crate::tags::to_set(&o.meta), ..Default::default() })
        })
    }

    async fn put_object_tagging(&self, req: S3Request<PutObjectTaggingInput>) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        timed!(self, "PutObjectTagging", {
            let i = req.input;
            let tags = crate::tags::from_set(&i.tagging.tag_set)?;
            crate::cause::set_kind("s3:ObjectTagging:Put");
            self.set_tags(&i.bucket, &i.key, tags).await?;
            ok(PutObjectTaggingOutput::default())
        })
    }

    async fn delete_object_tagging(&self, req: S3Request<DeleteObjectTaggingInput>) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        timed!(self, "DeleteObjectTagging", {
            crate::cause::set_kind("s3:ObjectTagging:Delete");
            self.set_tags(&req.input.bucket, &req.input.key, Vec::new()).await?;
            ok(DeleteObjectTaggingOutput::default())
        })
    }

    async fn delete_objects(&self, req: S3Request<DeleteObjectsInput>) -> S3Result<S3Response<DeleteObjectsOutput>> {
        timed!(self, "DeleteObjects", {
            let input = req.input;
            if input.delete.objects.len() > 1000 {
                return Err(s3_error!(MalformedXML, "at most 1000 keys can be deleted at once, not {}", input.delete.objects.len()));
            }
            strata_names::read(&*self.names, |s| s.bucket(&input.bucket).map(|_| ())).map_err(name_err)?;
            let quiet = input.delete.quiet.unwrap_or(false);
            let (mut deleted, mut errors) = (Vec::new(), Vec::new());
            // Keys are independent: delete a few at a time, so their name ops
            // and blob deletes share fsyncs (group commit), answering in order.
            let bucket = &input.bucket;
            let bypass = input.bypass_governance_retention == Some(true);
            let mut done = futures_util::stream::iter(input.delete.objects)
                .map(|o| async move {
                    let r = self.delete_key(bucket, &o.key, o.version_id.as_deref(), bypass).await;
                    (o, r)
                })
                .buffered(DELETES_IN_FLIGHT);
            while let Some((o, r)) = done.next().await {
                match r {
                    Ok(_) if quiet => {}
                    Ok(d) => deleted.push(DeletedObject {
                        key: Some(o.key),
                        delete_marker: d.marker.then_some(true),
                        delete_marker_version_id: d.version_id.clone().filter(|_| d.marker && o.version_id.is_none()),
                        version_id: o.version_id.clone(),
                    }),
                    Err(e) => errors.push(Error {
                        code: Some(e.code().as_str().to_owned()),
                        key: Some(o.key),
                        message: e.message().map(str::to_owned),
                        version_id: o.version_id,
                    }),
                }
            }
            ok(DeleteObjectsOutput { deleted: Some(deleted), errors: Some(errors), ..Default::default() })
        })
    }

    async fn copy_object(&self, req: S3Request<CopyObjectInput>) -> S3Result<S3Response<CopyObjectOutput>> {
        crate::cause::set_kind("s3:ObjectCreated:Copy");
        timed!(self, "CopyObject", self.do_copy(req).await)
    }

    async fn list_objects_v2(&self, req: S3Request<ListObjectsV2Input>) -> S3Result<S3Response<ListObjectsV2Output>> {
        timed!(self, "ListObjectsV2", self.do_list_objects_v2(req.input))
    }

    async fn list_objects(&self, req: S3Request<ListObjectsInput>) -> S3Result<S3Response<ListObjectsOutput>> {
        timed!(self, "ListObjects", self.do_list_objects(req.input))
    }

    async fn list_object_versions(&self, req: S3Request<ListObjectVersionsInput>) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        timed!(self, "ListObjectVersions", self.do_list_object_versions(req.input))
    }

    async fn create_multipart_upload(&self, req: S3Request<CreateMultipartUploadInput>) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        timed!(self, "CreateMultipartUpload", self.do_create_multipart_upload(req).await)
    }

    async fn upload_part(&self, req: S3Request<UploadPartInput>) -> S3Result<S3Response<UploadPartOutput>> {
        timed!(self, "UploadPart", self.do_upload_part(req).await)
    }

    async fn upload_part_copy(&self, req: S3Request<UploadPartCopyInput>) -> S3Result<S3Response<UploadPartCopyOutput>> {
        timed!(self, "UploadPartCopy", self.do_upload_part_copy(req).await)
    }

    async fn complete_multipart_upload(&self, req: S3Request<CompleteMultipartUploadInput>) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        timed!(self, "CompleteMultipartUpload", self.do_complete(req.input).await)
    }

    async fn abort_multipart_upload(&self, req: S3Request<AbortMultipartUploadInput>) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        timed!(self, "AbortMultipartUpload", {
            let out = self.names.apply(NameOp::AbortUpload { bucket: req.input.bucket, upload_id: req.input.upload_id }).await.map_err(name_err)?;
            self.free_outcome(out).await;
            ok(AbortMultipartUploadOutput::default())
        })
    }

    async fn list_parts(&self, req: S3Request<ListPartsInput>) -> S3Result<S3Response<ListPartsOutput>> {
        timed!(self, "ListParts", self.do_list_parts(req))
    }

    async fn list_multipart_uploads(&self, req: S3Request<ListMultipartUploadsInput>) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        timed!(self, "ListMultipartUploads", self.do_list_multipart_uploads(req))
    }
}

//! GetObject and HeadObject: conditions, ranges and parts, and the object
//! read that survives an overwrite racing with it.

use super::*;
use crate::sse::{CustomerKey, Seal};

/// An opened object: its name record, its encryption, its (plaintext) body.
pub(super) type Opened = (ObjectMeta, Option<Seal>, strata_router::BlobBody);

fn to_range(r: Option<Range>) -> Option<ByteRange> {
    r.map(|r| match r {
        Range::Int { first, last: Some(l) } => ByteRange::FromTo(first, l),
        Range::Int { first, last: None } => ByteRange::From(first),
        Range::Suffix { length } => ByteRange::Suffix(length),
    })
}

impl StrataS3 {
    /// Opens part `number` of the object (GET with `partNumber`): its byte
    /// range, read from the object the range was computed for (retried if
    /// an overwrite lands between the two).
    async fn open_part(
        &self,
        bucket: &str,
        key: &str,
        number: i32,
        version: Option<&str>,
        cond: &Conditions,
        customer: Option<CustomerKey>,
    ) -> Result<(Option<ByteRange>, Opened), S3Error> {
        for _ in 0..3 {
            let o = self.object_version(bucket, key, version)?;
            let (first, len) = multipart::part_bounds(&o, number)?;
            let range = (o.parts > 0 && len > 0).then_some(ByteRange::FromTo(first, first + len - 1));
            let opened = self.open_object(bucket, key, version, range, cond, customer.clone()).await?;
            if opened.0.blob == o.blob {
                return Ok((range, opened));
            }
        }
        Err(s3_error!(SlowDown, "{key:?} is being overwritten; try again"))
    }

    /// Opens the object's blob (its plaintext, for an encrypted object:
    /// then the request's customer key must open it). An overwrite or
    /// delete racing with this read frees the blob the name pointed at:
    /// then the name is read again, so the reader gets the new object (or
    /// NoSuchKey), never an error for a key that always had a value.
    pub(super) async fn open_object(
        &self,
        bucket: &str,
        key: &str,
        version: Option<&str>,
        range: Option<ByteRange>,
        cond: &Conditions,
        customer: Option<CustomerKey>,
    ) -> Result<Opened, S3Error> {
        let mut tries = 0;
        loop {
            let o = self.object_version(bucket, key, version)?;
            cond.check(&o)?;
            let seal = self.open_seal(&o.meta, customer.clone()).await?;
            let got = match &seal {
                None => self.router.get(o.blob, range).await,
                Some(s) => self.open_sealed(&o, s, range).await?,
            };
            match got {
                Ok(body) => return Ok((o, seal, body)),
                Err(strata_router::RouterError::Deleted | strata_router::RouterError::NotFound) if tries < 3 => {
                    tries += 1;
                    if self.object_version(bucket, key, version).is_ok_and(|now| now.blob == o.blob) {
                        return Err(s3_error!(InternalError, "the blob of {key:?} is missing"));
                    }
                }
                Err(e) => return Err(router_err(e)),
            }
        }
    }

    pub(super) async fn do_get(&self, input: GetObjectInput) -> S3Result<S3Response<GetObjectOutput>> {
        let version = input.version_id.as_deref();
        let cond = Conditions {
            if_match: input.if_match,
            if_none_match: input.if_none_match,
            if_modified_since: input.if_modified_since,
            if_unmodified_since: input.if_unmodified_since,
        };
        let customer = crate::sse::customer_of!(input);
        let (range, (o, seal, body)) = match input.part_number {
            None => {
                let range = to_range(input.range);
                (range, self.open_object(&input.bucket, &input.key, version, range, &cond, customer).await?)
            }
            Some(_) if input.range.is_some() => return Err(s3_error!(InvalidRequest, "a Range header and a partNumber cannot both be given")),
            Some(n) => self.open_part(&input.bucket, &input.key, n, version, &cond, customer).await?,
        };
        let (start, end) = body.range;
        // Whole-object checksums describe only a whole object.
        let sums = if range.is_none() { stored_checksums(input.checksum_mode.as_ref(), &o) } else { Default::default() };
        let mut out = object_output!(
            GetObjectOutput {
                body: Some(streaming(body.data)),
                content_length: Some((end - start) as i64),
                content_range: range.map(|_| format!("bytes {start}-{}/{}", end.saturating_sub(1), o.size)),
                tag_count: Some(crate::tags::count(&o.meta) as i32).filter(|n| *n > 0),
            },
            &o,
            sums
        );
        // `response-*` query parameters override the stored headers in this answer.
        out.cache_control = input.response_cache_control.or(out.cache_control);
        out.content_disposition = input.response_content_disposition.or(out.content_disposition);
        out.content_encoding = input.response_content_encoding.or(out.content_encoding);
        out.content_language = input.response_content_language.or(out.content_language);
        out.content_type = input.response_content_type.or(out.content_type);
        out.expires = input.response_expires.or(out.expires);
        crate::sse::set_reply!(out, seal.map(|s| s.reply()).unwrap_or_default());
        out.version_id = self.version_of_answer(&input.bucket, &o);
        (out.object_lock_mode, out.object_lock_retain_until_date, out.object_lock_legal_hold_status) = lock::lock_out(&o);
        ok(out)
    }

    pub(super) async fn do_head(&self, input: HeadObjectInput) -> S3Result<S3Response<HeadObjectOutput>> {
        let o = self.object_version(&input.bucket, &input.key, input.version_id.as_deref())?;
        let seal = self.open_seal(&o.meta, crate::sse::customer_of!(input)).await?;
        let cond = Conditions {
            if_match: input.if_match,
            if_none_match: input.if_none_match,
            if_modified_since: input.if_modified_since,
            if_unmodified_since: input.if_unmodified_since,
        };
        cond.check(&o)?;
        let (len, range_text) = match (input.range, input.part_number) {
            (Some(_), Some(_)) => return Err(s3_error!(InvalidRequest, "a Range header and a partNumber cannot both be given")),
            (None, Some(n)) => {
                let (first, len) = multipart::part_bounds(&o, n)?;
                (len, (o.parts > 0).then(|| format!("bytes {first}-{}/{}", (first + len).saturating_sub(1), o.size)))
            }
            (None, None) => (o.size, None),
            (Some(r), None) => {
                let rr = r.check(o.size).map_err(|_| s3_error!(InvalidRange, "the range is outside the object's {} bytes", o.size))?;
                (rr.end - rr.start, Some(format!("bytes {}-{}/{}", rr.start, rr.end.saturating_sub(1), o.size)))
            }
        };
        let sums = if range_text.is_none() { stored_checksums(input.checksum_mode.as_ref(), &o) } else { Default::default() };
        let mut out = object_output!(HeadObjectOutput { content_length: Some(len as i64), content_range: range_text }, &o, sums);
        crate::sse::set_reply!(out, seal.map(|s| s.reply()).unwrap_or_default());
        out.version_id = self.version_of_answer(&input.bucket, &o);
        (out.object_lock_mode, out.object_lock_retain_until_date, out.object_lock_legal_hold_status) = lock::lock_out(&o);
        ok(out)
    }

    /// The `x-amz-version-id` of an answer about `o` (none for a bucket never versioned).
    fn version_of_answer(&self, bucket: &str, o: &ObjectMeta) -> Option<String> {
        strata_names::read(&*self.names, |s| s.versioning.contains_key(bucket)).then(|| strata_names::version_id(o).to_owned())
    }
}

//! PutObject, CopyObject, object tags and deletes of the current object:
//! the writes that name a blob (or remove a name), with their conditions.

use super::*;

impl StrataS3 {
    pub(super) async fn do_put(&self, req: S3Request<PutObjectInput>) -> S3Result<S3Response<PutObjectOutput>> {
        let mut input = req.input;
        // A browser POST upload's key may name the uploaded file's name;
        // its form's `acl` field is the object's canned ACL.
        if let Some(form) = req.extensions.get::<crate::request_id::PostForm>() {
            crate::cause::set_kind("s3:ObjectCreated:Post");
            if let Some(name) = &form.file_name {
                input.key = input.key.replace("${filename}", name);
            }
            if input.acl.is_none() {
                input.acl = form.acl.clone().map(ObjectCannedACL::from);
            }
        }
        let asked = crate::sse::encryption_asked!(input);
        let sums = Expected::new(given_checksums!(input), &req.headers, req.trailing_headers)?;
        check_key(&input.key)?;
        let tags = crate::tags::from_header(input.tagging.as_deref())?;
        let now = self.now_ms();
        let expiry_ms = self.expiry(&input.bucket, &input.key, now)?;
        let guard = match (&input.if_match, &input.if_none_match) {
            (Some(_), Some(_)) => return Err(s3_error!(InvalidArgument, "If-Match and If-None-Match cannot both be given on a PUT")),
            (Some(c), None) => Guard::Matches(c.as_etag().map(|e| e.value().to_owned())),
            (None, Some(c)) if c.is_any() => Guard::Absent,
            (None, Some(_)) => return Err(s3_error!(NotImplemented, "If-None-Match on a PUT takes only *")),
            (None, None) => Guard::None,
        };
        // Checked again, atomically, when the name is applied; checking now
        // too spares writing a body that would be refused.
        match &guard {
            Guard::Absent if self.object(&input.bucket, &input.key).is_ok() => {
                return Err(s3_error!(PreconditionFailed, "{:?} exists (If-None-Match: *)", input.key));
            }
            Guard::Matches(want) => {
                let o = self.object(&input.bucket, &input.key)?;
                if want.as_ref().is_some_and(|w| *w != o.etag) {
                    return Err(s3_error!(PreconditionFailed, "If-Match does not match the ETag of {:?}", input.key));
                }
            }
            _ => {}
        }
        let mut meta = meta_in(input.metadata.clone());
        crate::headers::standard_headers_in!(input).store_in(&mut meta);
        let lock = self.lock_for_write(
            &input.bucket,
            input.object_lock_mode.as_ref(),
            input.object_lock_retain_until_date.as_ref(),
            input.object_lock_legal_hold_status.as_ref(),
            now,
        )?;
        lock.store_in(&mut meta);
        let acl = crate::acl::Asked { canned: input.acl.as_ref().map(|a| a.as_str()), headers: crate::acl::object_grant_headers!(input), body: None };
        self.acl_on_write(&input.bucket, &acl, &mut meta)?;
        let content_type = content_type_in(input.content_type);
        let sealing = self.seal_for_write(&input.bucket, asked).await?;
        let opts = self.put_opts(content_type.clone(), meta.clone(), expiry_ms, now);
        let stored = self.store(input.body, input.content_length, input.content_md5.as_deref(), &sums, opts, sealing.as_ref().map(|s| &s.0)).await?;
        let tag = hex::encode(stored.md5);
        meta.extend(crate::checksum::to_meta(stored.checksums.clone()));
        meta.extend(tags);
        let reply = sealing.map(|(seal, entries)| {
            meta.extend(entries);
            seal.reply()
        });
        let version_id = self.stamp_version(&input.bucket, &mut meta);
        let object = ObjectMeta { blob: stored.blob, size: stored.size, etag: tag.clone(), content_type, meta, modified_ms: now, expiry_ms, parts: 0 };
        self.name(input.bucket, input.key, object, guard, stored.started_ms).await?;
        let mut out = with_checksums!(PutObjectOutput { e_tag: Some(etag(&tag)), expiration: expiration(expiry_ms), version_id: version_id }, stored.checksums);
        crate::sse::set_reply!(out, reply.unwrap_or_default());
        ok(out)
    }

    /// Replaces an object's tags in place (same blob, same ETag). An
    /// overwrite racing with it wins: the tags then go on the new object,
    /// as if the tagging came after it.
    pub(super) async fn set_tags(&self, bucket: &str, key: &str, tags: Vec<(String, String)>) -> Result<(), S3Error> {
        self.rewrite_meta(bucket, key, "tags", |meta| crate::tags::replaced(meta, tags.clone())).await
    }

    /// Rewrites the current object's metadata in place with `change` (one
    /// name op bound to its blob); an overwrite racing with it wins and the
    /// change is made again on the new object. `what` names the change in
    /// the error when the key keeps changing.
    pub(super) async fn rewrite_meta(
        &self,
        bucket: &str,
        key: &str,
        what: &str,
        change: impl Fn(&[(String, String)]) -> Vec<(String, String)>,
    ) -> Result<(), S3Error> {
        for _ in 0..3 {
            let o = self.object(bucket, key)?;
            let op = NameOp::SetObjectMeta { bucket: bucket.to_owned(), key: key.to_owned(), blob: o.blob, meta: change(&o.meta), now_ms: self.now_ms() };
            match self.names.apply(op).await {
                Ok(_) => return Ok(()),
                Err(strata_names::NameError::PreconditionFailed(_)) => continue,
                Err(e) => return Err(name_err(e)),
            }
        }
        Err(s3_error!(OperationAborted, "{key:?} kept changing while its {what} were set; try again"))
    }

    pub(super) async fn delete_one(&self, bucket: &str, key: &str) -> Result<(), S3Error> {
        let out = self.names.apply(NameOp::DeleteObject { bucket: bucket.to_owned(), key: key.to_owned(), blob: None }).await.map_err(name_err)?;
        self.free_outcome(out).await;
        Ok(())
    }

    /// A conditional delete (`If-Match`, `x-amz-if-match-size`,
    /// `x-amz-if-match-last-modified-time`): removes the object only if it
    /// is as the conditions say, and only that object (a name op bound to
    /// its blob), so an overwrite landing in between is not deleted.
    pub(super) async fn delete_if(&self, i: &DeleteObjectInput) -> Result<(), S3Error> {
        let o = self.object(&i.bucket, &i.key)?;
        Conditions { if_match: i.if_match.clone(), if_none_match: None, if_modified_since: None, if_unmodified_since: None }.check(&o)?;
        if i.if_match_size.is_some_and(|s| u64::try_from(s).ok() != Some(o.size)) {
            return Err(s3_error!(PreconditionFailed, "{:?} is {} bytes, not the size the request names", i.key, o.size));
        }
        if let Some(t) = &i.if_match_last_modified_time
            && ms(t) / 1000 != o.modified_ms / 1000
        {
            return Err(s3_error!(PreconditionFailed, "{:?} was last modified at another time than the request names", i.key));
        }
        // A versioned bucket keeps the object: the delete adds a marker, as
        // an unconditional one does (an overwrite racing with it is hidden
        // by the marker, not destroyed).
        if strata_names::read(&*self.names, |s| s.versioning.contains_key(&i.bucket)) {
            self.delete_key(&i.bucket, &i.key, None, false).await?;
            return Ok(());
        }
        let op = NameOp::DeleteObject { bucket: i.bucket.clone(), key: i.key.clone(), blob: Some(o.blob) };
        let out = self.names.apply(op).await.map_err(name_err)?;
        if out.replaced.is_none() {
            return Err(s3_error!(PreconditionFailed, "{:?} changed while it was being deleted", i.key));
        }
        self.free_outcome(out).await;
        Ok(())
    }

    /// The bucket and key of a copy source, which the caller may read.
    /// The bucket, key and version (if named) of a copy source, which the caller may read.
    pub(super) fn copy_source<'a>(&self, who: Option<&s3s::auth::Credentials>, src: &'a CopySource) -> Result<(&'a str, &'a str, Option<&'a str>), S3Error> {
        let CopySource::Bucket { bucket, key, version_id } = src else {
            return Err(s3_error!(NotImplemented, "only bucket/key copy sources are supported"));
        };
        self.check_source_readable(who, bucket, key)?;
        Ok((bucket, key, version_id.as_deref()))
    }

    /// Copying from `bucket` needs a read grant on it (or a public bucket,
    /// or an object ACL granting READ), beside the write grant on the
    /// destination that access checks.
    pub(super) fn check_source_readable(&self, who: Option<&s3s::auth::Credentials>, bucket: &str, key: &str) -> Result<(), S3Error> {
        let who = who.map(|c| c.access_key.as_str());
        let readable = strata_names::read(&*self.names, |s| {
            let public = s.buckets.get(bucket).is_some_and(|b| b.public);
            public
                || who.and_then(|w| s.keys.get(w)).is_some_and(|k| k.grant(bucket).read || !s.buckets.contains_key(bucket))
                || crate::acl::object_allows(s, bucket, key, who, crate::acl::Perm::Read)
        });
        if readable { Ok(()) } else { Err(s3_error!(AccessDenied, "no read grant on the source bucket {bucket}")) }
    }

    pub(super) async fn do_copy(&self, req: S3Request<CopyObjectInput>) -> S3Result<S3Response<CopyObjectOutput>> {
        let input = req.input;
        let asked = crate::sse::encryption_asked!(input);
        let source_key = crate::sse::copy_source_customer_of!(input);
        check_key(&input.key)?;
        let (src_bucket, src_key, src_version) = self.copy_source(req.credentials.as_ref(), &input.copy_source)?;
        let replace = input.metadata_directive.as_ref().is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        if (src_bucket, src_key) == (input.bucket.as_str(), input.key.as_str())
            && src_version.is_none()
            && !replace
            && input.storage_class.is_none()
            && input.website_redirect_location.is_none()
            && !asked.any()
        {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
            ));
        }
        let cond = copy_conditions!(input);
        let (src, _, body) = self.open_object(src_bucket, src_key, src_version, None, &cond, source_key).await.map_err(unmet_copy_condition)?;
        let now = self.now_ms();
        let expiry_ms = self.expiry(&input.bucket, &input.key, now)?;
        let new_tags = match &input.tagging_directive {
            Some(d) if d.as_str() == TaggingDirective::REPLACE => Some(crate::tags::from_header(input.tagging.as_deref())?),
            _ => None,
        };
        // The bytes are the source's, so its stored checksums still hold.
        let (content_type, mut meta) = if replace {
            let mut meta = meta_in(input.metadata.clone());
            meta.extend(src.meta.iter().filter(|(k, _)| crate::convert::is_internal(k)).cloned());
            crate::headers::standard_headers_in!(input).store_in(&mut meta);
            (content_type_in(input.content_type), meta)
        } else {
            (src.content_type.clone(), src.meta.clone())
        };
        if let Some(tags) = new_tags {
            meta = crate::tags::replaced(&meta, tags);
        }
        // The copy is encrypted, locked and given an ACL as this request
        // asks (the source's encryption, lock and ACL are not carried over).
        crate::sse::strip(&mut meta);
        let acl = crate::acl::Asked { canned: input.acl.as_ref().map(|a| a.as_str()), headers: crate::acl::object_grant_headers!(input), body: None };
        meta = crate::acl::replaced(&meta, &crate::acl::Acl::default());
        self.acl_on_write(&input.bucket, &acl, &mut meta)?;
        self.lock_for_write(
            &input.bucket,
            input.object_lock_mode.as_ref(),
            input.object_lock_retain_until_date.as_ref(),
            input.object_lock_legal_hold_status.as_ref(),
            now,
        )?
        .store_in(&mut meta);
        let sealing = self.seal_for_write(&input.bucket, asked).await?;
        let opts = self.put_opts(content_type.clone(), meta.clone(), expiry_ms, now);
        let stored = self.store(Some(streaming(body.data)), Some(src.size as i64), None, &Expected::default(), opts, sealing.as_ref().map(|s| &s.0)).await?;
        let tag = hex::encode(stored.md5);
        let reply = sealing.map(|(seal, entries)| {
            meta.extend(entries);
            seal.reply()
        });
        let version_id = self.stamp_version(&input.bucket, &mut meta);
        let copy_source_version_id =
            strata_names::read(&*self.names, |s| s.versioning.contains_key(src_bucket)).then(|| strata_names::version_id(&src).to_owned());
        let object = ObjectMeta { blob: stored.blob, size: stored.size, etag: tag.clone(), content_type, meta, modified_ms: now, expiry_ms, parts: 0 };
        self.name(input.bucket, input.key, object, Guard::None, stored.started_ms).await?;
        let mut out = CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult { e_tag: Some(etag(&tag)), last_modified: Some(ts(now)), ..Default::default() }),
            version_id,
            copy_source_version_id,
            ..Default::default()
        };
        crate::sse::set_reply!(out, reply.unwrap_or_default());
        ok(out)
    }
}

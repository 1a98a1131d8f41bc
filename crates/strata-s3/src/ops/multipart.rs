//! Multipart uploads: parts recorded in the upload, copied parts, and
//! completion by stitching the parts' chunks into one composite blob.

use super::*;

impl StrataS3 {
    pub(super) async fn do_create_multipart_upload(&self, req: S3Request<CreateMultipartUploadInput>) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let i = req.input;
        let asked = crate::sse::encryption_asked!(i);
        check_key(&i.key)?;
        let mut meta = meta_in(i.metadata.clone());
        crate::headers::standard_headers_in!(i).store_in(&mut meta);
        meta.extend(crate::tags::from_header(i.tagging.as_deref())?);
        let acl = crate::acl::Asked { canned: i.acl.as_ref().map(|a| a.as_str()), headers: crate::acl::object_grant_headers!(i), body: None };
        self.acl_on_write(&i.bucket, &acl, &mut meta)?;
        self.lock_for_write(
            &i.bucket,
            i.object_lock_mode.as_ref(),
            i.object_lock_retain_until_date.as_ref(),
            i.object_lock_legal_hold_status.as_ref(),
            self.now_ms(),
        )?
        .store_in(&mut meta);
        // The upload's data key, sealed, goes with it: every part is
        // sealed under it, and the object takes the upload's metadata.
        let reply = self.seal_for_write(&i.bucket, asked).await?.map(|(seal, entries)| {
            meta.extend(entries);
            seal.reply()
        });
        let upload_id = {
            use rand::RngCore;
            let mut raw = [0u8; 16];
            rand::rng().fill_bytes(&mut raw);
            hex::encode(raw)
        };
        let upload = Upload {
            key: i.key.clone(),
            created_ms: self.now_ms(),
            content_type: content_type_in(i.content_type),
            meta,
            owner: req.credentials.map(|c| c.access_key).unwrap_or_default(),
            parts: BTreeMap::new(),
        };
        self.names.apply(NameOp::CreateUpload { bucket: i.bucket.clone(), upload_id: upload_id.clone(), upload }).await.map_err(name_err)?;
        let mut out = CreateMultipartUploadOutput { bucket: Some(i.bucket), key: Some(i.key), upload_id: Some(upload_id), ..Default::default() };
        crate::sse::set_reply!(out, reply.unwrap_or_default());
        ok(out)
    }

    pub(super) async fn do_upload_part(&self, req: S3Request<UploadPartInput>) -> S3Result<S3Response<UploadPartOutput>> {
        let i = req.input;
        let customer = crate::sse::customer_of!(i);
        let sums = Expected::new(given_checksums!(i), &req.headers, req.trailing_headers)?;
        let number = part_number(i.part_number)?;
        let upload_meta = self.check_upload(&i.bucket, &i.upload_id, &i.key)?;
        let seal = self.open_seal(&upload_meta, customer).await?;
        let now = self.now_ms();
        let expiry_ms = self.expiry(&i.bucket, &i.key, now)?;
        let opts = self.put_opts(String::new(), vec![], expiry_ms, now);
        let stored = self.store(i.body, i.content_length, i.content_md5.as_deref(), &sums, opts, seal.as_ref()).await?;
        let c = stored.checksums.clone();
        let tag = self.add_part(i.bucket, i.upload_id, number, stored, now).await?;
        let mut out = with_checksums!(UploadPartOutput { e_tag: Some(etag(&tag)) }, c);
        crate::sse::set_reply!(out, seal.map(|s| s.reply()).unwrap_or_default());
        ok(out)
    }

    pub(super) fn do_list_parts(&self, req: S3Request<ListPartsInput>) -> S3Result<S3Response<ListPartsOutput>> {
        let i = req.input;
        let upload = strata_names::read(&*self.names, |s| {
            let b = s.bucket(&i.bucket).map_err(name_err)?;
            b.uploads.get(&i.upload_id).filter(|u| u.key == i.key).cloned().ok_or_else(|| s3_error!(NoSuchUpload, "no multipart upload {:?}", i.upload_id))
        })?;
        let max = i.max_parts.map_or(1000, |m| m.clamp(0, 1000) as usize);
        let marker = i.part_number_marker.map_or(0, |m| m.max(0) as u32);
        let mut parts: Vec<Part> = Vec::new();
        let mut truncated = false;
        for (n, p) in upload.parts.range(marker + 1..) {
            if parts.len() == max {
                truncated = true;
                break;
            }
            parts.push(Part {
                part_number: Some(*n as i32),
                size: Some(p.size as i64),
                e_tag: Some(etag(&p.etag)),
                last_modified: Some(ts(p.modified_ms)),
                ..Default::default()
            });
        }
        let next = if truncated { parts.last().and_then(|p| p.part_number) } else { None };
        ok(ListPartsOutput {
            bucket: Some(i.bucket),
            key: Some(i.key),
            upload_id: Some(i.upload_id),
            max_parts: Some(max as i32),
            part_number_marker: i.part_number_marker,
            next_part_number_marker: next,
            is_truncated: Some(truncated),
            parts: Some(parts),
            ..Default::default()
        })
    }

    pub(super) fn do_list_multipart_uploads(&self, req: S3Request<ListMultipartUploadsInput>) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let i = req.input;
        let max = i.max_uploads.map_or(1000, |m| m.clamp(0, 1000) as usize);
        let prefix = i.prefix.clone().unwrap_or_default();
        let key_marker = i.key_marker.clone().unwrap_or_default();
        let id_marker = i.upload_id_marker.clone().unwrap_or_default();
        let mut all = strata_names::read(&*self.names, |s| {
            let b = s.bucket(&i.bucket).map_err(name_err)?;
            Ok::<_, S3Error>(
                b.uploads
                    .iter()
                    .filter(|(_, u)| u.key.starts_with(&prefix))
                    .map(|(id, u)| (u.key.clone(), id.clone(), u.created_ms))
                    .filter(|(k, id, _)| key_marker.is_empty() || *k > key_marker || (*k == key_marker && !id_marker.is_empty() && *id > id_marker))
                    .collect::<Vec<_>>(),
            )
        })?;
        all.sort();
        let truncated = all.len() > max;
        all.truncate(max);
        let next = if truncated { all.last().cloned() } else { None };
        ok(ListMultipartUploadsOutput {
            bucket: Some(i.bucket),
            prefix: i.prefix,
            key_marker: i.key_marker,
            upload_id_marker: i.upload_id_marker,
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: next.as_ref().map(|n| n.0.clone()),
            next_upload_id_marker: next.map(|n| n.1),
            uploads: Some(
                all.into_iter()
                    .map(|(key, id, t)| MultipartUpload { key: Some(key), upload_id: Some(id), initiated: Some(ts(t)), ..Default::default() })
                    .collect(),
            ),
            ..Default::default()
        })
    }

    /// Checks that `upload_id` is an upload of `key` in `bucket`; returns
    /// its metadata (which holds its encryption).
    pub(super) fn check_upload(&self, bucket: &str, upload_id: &str, key: &str) -> Result<Vec<(String, String)>, S3Error> {
        strata_names::read(&*self.names, |s| {
            let b = s.bucket(bucket).map_err(name_err)?;
            match b.uploads.get(upload_id) {
                Some(u) if u.key == key => Ok(u.meta.clone()),
                _ => Err(s3_error!(NoSuchUpload, "no multipart upload {upload_id:?} for key {key:?}")),
            }
        })
    }

    /// Records a stored part of an upload (freeing the part it replaces, or
    /// the new blob if the upload is gone); returns its ETag.
    pub(super) async fn add_part(&self, bucket: String, upload_id: String, number: u32, stored: Stored, now: u64) -> Result<String, S3Error> {
        let tag = hex::encode(stored.md5);
        self.check_naming_deadline(stored.blob, stored.started_ms).await?;
        let part = PartMeta { blob: stored.blob, size: stored.size, etag: tag.clone(), modified_ms: now };
        match self.names.apply(NameOp::PutPart { bucket, upload_id, number, part }).await {
            Ok(out) => self.free_outcome(out).await,
            Err(e) => {
                self.free(stored.blob).await;
                return Err(name_err(e));
            }
        }
        Ok(tag)
    }

    pub(super) async fn do_upload_part_copy(&self, req: S3Request<UploadPartCopyInput>) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let i = req.input;
        let customer = crate::sse::customer_of!(i);
        let source_key = crate::sse::copy_source_customer_of!(i);
        let number = part_number(i.part_number)?;
        let (src_bucket, src_key, src_version) = self.copy_source(req.credentials.as_ref(), &i.copy_source)?;
        let upload_meta = self.check_upload(&i.bucket, &i.upload_id, &i.key)?;
        let seal = self.open_seal(&upload_meta, customer).await?;
        let range = i.copy_source_range.as_deref().map(copy_range).transpose()?;
        let cond = copy_conditions!(i);
        let (src, _, body) = self.open_object(src_bucket, src_key, src_version, range, &cond, source_key).await.map_err(unmet_copy_condition)?;
        if let Some(ByteRange::FromTo(_, last)) = range
            && last >= src.size
        {
            return Err(s3_error!(InvalidArgument, "range specified is not valid for source object of size: {}", src.size));
        }
        let (start, end) = body.range;
        let now = self.now_ms();
        let expiry_ms = self.expiry(&i.bucket, &i.key, now)?;
        let opts = self.put_opts(String::new(), vec![], expiry_ms, now);
        let stored = self.store(Some(streaming(body.data)), Some((end - start) as i64), None, &Expected::default(), opts, seal.as_ref()).await?;
        let tag = self.add_part(i.bucket, i.upload_id, number, stored, now).await?;
        let mut out = UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult { e_tag: Some(etag(&tag)), last_modified: Some(ts(now)), ..Default::default() }),
            ..Default::default()
        };
        crate::sse::set_reply!(out, seal.map(|s| s.reply()).unwrap_or_default());
        ok(out)
    }

    pub(super) async fn do_complete(&self, input: CompleteMultipartUploadInput) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let parts = input.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
        if parts.is_empty() {
            return Err(s3_error!(MalformedXML, "the completion lists no parts"));
        }
        let upload = strata_names::read(&*self.names, |s| s.bucket(&input.bucket).map(|b| b.uploads.get(&input.upload_id).cloned())).map_err(name_err)?;
        let Some(upload) = upload else {
            // A completion retried after its answer was lost (SDKs retry on
            // a time-out) answers as the first did while the key still holds
            // the object it made.
            return match self.completed_by(&input.bucket, &input.key, &input.upload_id) {
                Some(tag) => completed(input.bucket, input.key, &tag),
                None => Err(s3_error!(NoSuchUpload, "no multipart upload {:?}", input.upload_id)),
            };
        };
        if upload.key != input.key {
            return Err(s3_error!(NoSuchUpload, "upload {:?} is for another key", input.upload_id));
        }
        let mut used: Vec<(u32, PartMeta)> = Vec::with_capacity(parts.len());
        for (i, p) in parts.iter().enumerate() {
            let n = p.part_number.ok_or_else(|| s3_error!(InvalidPart, "part {} has no part number", i + 1))?;
            let n = u32::try_from(n).map_err(|_| s3_error!(InvalidPart, "part number {n} is out of range"))?;
            if used.last().is_some_and(|(m, _)| *m >= n) {
                return Err(s3_error!(InvalidPartOrder, "part numbers must be listed in ascending order; {n} follows {}", used.last().map_or(0, |u| u.0)));
            }
            let stored = upload.parts.get(&n).ok_or_else(|| s3_error!(InvalidPart, "part {n} was not uploaded"))?;
            if let Some(e) = &p.e_tag
                && e.value() != stored.etag
            {
                return Err(s3_error!(InvalidPart, "part {n}'s ETag {:?} is not the uploaded part's {:?}", e.value(), stored.etag));
            }
            used.push((n, stored.clone()));
        }
        let last = used.len() - 1;
        if let Some((n, p)) = used[..last].iter().find(|(_, p)| p.size < self.opts.min_part_bytes) {
            return Err(s3_error!(EntityTooSmall, "part {n} is {} bytes; every part but the last must be at least {}", p.size, self.opts.min_part_bytes));
        }
        // Stitch: the new composite lists the parts' chunks in order.
        let mut pieces = Vec::new();
        let mut md5s = Md5::new();
        for (_, p) in &used {
            pieces.extend(self.router.pieces(p.blob).await.map_err(router_err)?.into_iter().filter(|c| c.1 > 0));
            let raw = hex::decode(&p.etag).map_err(|_| s3_error!(InternalError, "stored part ETag {:?} is not hex", p.etag))?;
            md5s.update(&raw);
        }
        let tag = format!("{}-{}", hex::encode(md5s.finalize()), used.len());
        let now = self.now_ms();
        let expiry_ms = self.expiry(&input.bucket, &input.key, now)?;
        let size = used.iter().map(|(_, p)| p.size).sum();
        let opts = self.put_opts(upload.content_type.clone(), upload.meta.clone(), expiry_ms, now);
        let started_ms = self.now_ms();
        let blob = self.router.put_composite(opts, pieces).await.map_err(router_err)?;
        // The parts stay held by the upload until the name op below takes
        // them over; the new composite itself must be named in time.
        if let Err(e) = self.router.check_naming_deadline(started_ms) {
            let _ = self.router.forget_composite(blob).await;
            return Err(router_err(e));
        }
        let mut meta: Vec<(String, String)> = upload
            .meta
            .into_iter()
            .chain([
                (UPLOAD_ID_META.to_owned(), input.upload_id.clone()),
                (PART_SIZES_META.to_owned(), encode_part_sizes(&used.iter().map(|(_, p)| p.size).collect::<Vec<_>>())),
            ])
            .collect();
        let version_id = self.stamp_version(&input.bucket, &mut meta);
        let object =
            ObjectMeta { blob, size, etag: tag.clone(), content_type: upload.content_type, meta, modified_ms: now, expiry_ms, parts: used.len() as u32 };
        let op = NameOp::CompleteUpload {
            bucket: input.bucket.clone(),
            upload_id: input.upload_id.clone(),
            used: used.iter().map(|(n, p)| (*n, p.blob)).collect(),
            object,
        };
        match self.names.apply(op).await {
            Ok(out) => {
                // The parts' chunks now belong to the new blob: drop only
                // the parts' own composite records.
                for (_, p) in &used {
                    if p.blob.kind() == strata_types::BlobKind::Composite
                        && let Err(e) = self.router.forget_composite(p.blob).await
                    {
                        tracing::warn!(blob = %p.blob, error = %e, "could not drop a completed part's record");
                    }
                }
                self.free_outcome(out).await;
            }
            Err(e) => {
                let _ = self.router.forget_composite(blob).await;
                // A concurrent completion of the same upload won the race.
                if matches!(e, strata_names::NameError::NoSuchUpload(_))
                    && let Some(tag) = self.completed_by(&input.bucket, &input.key, &input.upload_id)
                {
                    return completed(input.bucket, input.key, &tag);
                }
                return Err(name_err(e));
            }
        }
        let mut out = completed(input.bucket, input.key, &tag)?;
        out.output.version_id = version_id;
        Ok(out)
    }

    /// The ETag of the live object at `key` if upload `upload_id` made it.
    fn completed_by(&self, bucket: &str, key: &str, upload_id: &str) -> Option<String> {
        let now = self.now_ms();
        strata_names::read(&*self.names, |s| {
            let o = s.bucket(bucket).ok()?.objects.get(key).filter(|o| !o.expired(now))?;
            o.meta.iter().any(|(k, v)| k == UPLOAD_ID_META && v == upload_id).then(|| o.etag.clone())
        })
    }
}

/// The answer to a completion that made (or had made) the object tagged `tag`.
fn completed(bucket: String, key: String, tag: &str) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    ok(CompleteMultipartUploadOutput { bucket: Some(bucket), key: Some(key), e_tag: Some(etag(tag)), ..Default::default() })
}

/// The metadata entry (internal: see `convert::is_internal`) naming the
/// multipart upload an object was completed from.
const UPLOAD_ID_META: &str = "/upload-id";

/// The metadata entry holding a multipart object's part sizes, in order,
/// run-length encoded (`size*count` runs joined by commas: SDKs upload
/// equal parts, so this is short), for GET and HEAD by `partNumber`.
const PART_SIZES_META: &str = "/part-sizes";

fn encode_part_sizes(sizes: &[u64]) -> String {
    let mut runs: Vec<(u64, u32)> = Vec::new();
    for &s in sizes {
        match runs.last_mut() {
            Some((size, n)) if *size == s => *n += 1,
            _ => runs.push((s, 1)),
        }
    }
    runs.iter().map(|(s, n)| format!("{s}*{n}")).collect::<Vec<_>>().join(",")
}

/// The sizes of a multipart object's parts, in order, as recorded at its
/// completion (None for an object of one PUT; an error for a multipart
/// object completed before they were recorded).
pub(crate) fn part_sizes(o: &ObjectMeta) -> Result<Option<Vec<u64>>, S3Error> {
    if o.parts == 0 {
        return Ok(None);
    }
    let encoded = o
        .meta
        .iter()
        .find(|(k, _)| k == PART_SIZES_META)
        .map(|(_, v)| v)
        .ok_or_else(|| s3_error!(NotImplemented, "this object's part boundaries were not recorded (it was completed before Strata kept them)"))?;
    let mut sizes = Vec::with_capacity(o.parts as usize);
    for run in encoded.split(',') {
        let (size, count) = run
            .split_once('*')
            .and_then(|(s, c)| Some((s.parse::<u64>().ok()?, c.parse::<usize>().ok()?)))
            .filter(|(_, c)| sizes.len() + c <= 10_000)
            .ok_or_else(|| s3_error!(InternalError, "stored part sizes {encoded:?} are malformed"))?;
        sizes.extend(std::iter::repeat_n(size, count));
    }
    Ok(Some(sizes))
}

/// The bytes (first byte, length) of part `number` of `o`: S3's GET and
/// HEAD with `partNumber`. An object made by one PUT is its own part 1.
pub(super) fn part_bounds(o: &ObjectMeta, number: i32) -> Result<(u64, u64), S3Error> {
    let unsatisfiable = || {
        let mut e = s3_error!(InvalidRange, "part {number} is not a part of this object ({} parts)", o.parts.max(1));
        e.set_code(s3s::S3ErrorCode::Custom("InvalidPartNumber".into()));
        e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
        e
    };
    let n = usize::try_from(number)
        .ok()
        .filter(|n| (1..=10_000).contains(n))
        .ok_or_else(|| s3_error!(InvalidArgument, "partNumber must be from 1 to 10000, not {number}"))?;
    let sizes = part_sizes(o)?.unwrap_or_else(|| vec![o.size]);
    let size = *sizes.get(n - 1).ok_or_else(unsatisfiable)?;
    Ok((sizes[..n - 1].iter().sum(), size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn multipart(sizes: &[u64]) -> ObjectMeta {
        ObjectMeta {
            blob: strata_types::BlobId::new_in(strata_types::BlobKind::Simple, 0, Default::default(), &mut rand::rng()),
            size: sizes.iter().sum(),
            etag: "e".into(),
            content_type: String::new(),
            meta: vec![(PART_SIZES_META.to_owned(), encode_part_sizes(sizes))],
            modified_ms: 0,
            expiry_ms: 0,
            parts: sizes.len() as u32,
        }
    }

    #[test]
    fn part_bounds_follow_the_recorded_sizes() {
        let o = multipart(&[5, 5, 5, 7, 7, 2]);
        assert_eq!(o.meta[0].1, "5*3,7*2,2*1");
        let got: Vec<(u64, u64)> = (1..=6).map(|n| part_bounds(&o, n).unwrap()).collect();
        assert_eq!(got, vec![(0, 5), (5, 5), (10, 5), (15, 7), (22, 7), (29, 2)]);
        let beyond = part_bounds(&o, 7).unwrap_err();
        assert_eq!((beyond.code().as_str(), beyond.status_code()), ("InvalidPartNumber", Some(http::StatusCode::RANGE_NOT_SATISFIABLE)));
        assert_eq!(part_bounds(&o, 0).unwrap_err().code().as_str(), "InvalidArgument");
        let single = ObjectMeta { parts: 0, meta: vec![], ..o.clone() };
        assert_eq!(part_bounds(&single, 1).unwrap(), (0, 31));
        assert!(part_bounds(&single, 2).is_err());
        let unrecorded = ObjectMeta { meta: vec![], ..o };
        assert_eq!(part_bounds(&unrecorded, 1).unwrap_err().code().as_str(), "NotImplemented");
    }
}

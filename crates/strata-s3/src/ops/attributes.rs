//! GetObjectAttributes: an object's ETag, size, storage class, stored
//! checksums and, for a multipart object, its parts, paged.

use super::*;

/// The attributes GetObjectAttributes knows.
const ATTRIBUTES: [&str; 5] =
    [ObjectAttributes::CHECKSUM, ObjectAttributes::ETAG, ObjectAttributes::OBJECT_PARTS, ObjectAttributes::OBJECT_SIZE, ObjectAttributes::STORAGE_CLASS];

impl StrataS3 {
    pub(super) fn do_get_object_attributes(&self, i: GetObjectAttributesInput) -> S3Result<S3Response<GetObjectAttributesOutput>> {
        let o = self.object_version(&i.bucket, &i.key, i.version_id.as_deref())?;
        crate::sse::check_customer(&o.meta, crate::sse::customer_of!(i).as_ref())?;
        // The header is a comma-separated list, which may reach here as one item.
        let asked: Vec<&str> = i.object_attributes.iter().flat_map(|x| x.as_str().split(',')).map(str::trim).filter(|x| !x.is_empty()).collect();
        let want = |a: &str| asked.contains(&a);
        if asked.is_empty() || asked.iter().any(|x| !ATTRIBUTES.contains(x)) {
            return Err(s3_error!(InvalidArgument, "x-amz-object-attributes must name some of {:?}", ATTRIBUTES));
        }
        let mut out = GetObjectAttributesOutput { last_modified: Some(ts(o.modified_ms)), ..Default::default() };
        if want(ObjectAttributes::ETAG) {
            out.e_tag = Some(etag(&o.etag));
        }
        if want(ObjectAttributes::OBJECT_SIZE) {
            out.object_size = Some(o.size as i64);
        }
        if want(ObjectAttributes::STORAGE_CLASS) {
            out.storage_class = Some(StorageClass::from(StorageClass::STANDARD.to_owned()));
        }
        if want(ObjectAttributes::CHECKSUM) {
            let sums = crate::checksum::from_meta(&o.meta);
            out.checksum = (sums != Checksum::default()).then_some(sums);
        }
        if want(ObjectAttributes::OBJECT_PARTS)
            && let Some(sizes) = multipart::part_sizes(&o)?
        {
            let max = i.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
            let after = i.part_number_marker.map_or(0, |m| m.max(0) as usize);
            let page: Vec<ObjectPart> = sizes
                .iter()
                .enumerate()
                .skip(after)
                .take(max)
                .map(|(n, size)| ObjectPart { part_number: Some(n as i32 + 1), size: Some(*size as i64), ..Default::default() })
                .collect();
            let last = page.last().and_then(|p| p.part_number).unwrap_or(after as i32);
            let truncated = (last as usize) < sizes.len();
            out.object_parts = Some(GetObjectAttributesParts {
                total_parts_count: Some(sizes.len() as i32),
                part_number_marker: Some(after as i32),
                next_part_number_marker: truncated.then_some(last),
                max_parts: Some(max as i32),
                is_truncated: Some(truncated),
                parts: Some(page),
            });
        }
        ok(out)
    }
}

//! Listings: ListObjects, ListObjectsV2 and ListObjectVersions over one
//! page of the name index, with S3's paging, delimiters and encodings.

use super::*;

const MAX_KEYS: i32 = 1000;

fn b64(s: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}

fn unb64(s: &str) -> Result<String, S3Error> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| s3_error!(InvalidArgument, "the continuation token is not valid"))
}

fn page_size(max: Option<i32>) -> Result<usize, S3Error> {
    match max {
        None => Ok(MAX_KEYS as usize),
        Some(m) if m < 0 => Err(s3_error!(InvalidArgument, "max-keys must not be negative")),
        Some(m) => Ok(m.min(MAX_KEYS) as usize),
    }
}

/// One page of a listing, keys encoded as the request asked
/// (`encoding-type=url`), shared by ListObjects, ListObjectsV2 and
/// ListObjectVersions.
struct Listed {
    url: bool,
    prefix: String,
    delimiter: Option<String>,
    max: i32,
    truncated: bool,
    /// The last key or prefix returned, raw (continue after it).
    next: Option<String>,
    contents: Vec<Object>,
    prefixes: Vec<CommonPrefix>,
}

impl Listed {
    fn enc(&self, s: &str) -> String {
        if self.url { url_encode(s) } else { s.to_owned() }
    }
}

fn object_out(key: &str, o: &ObjectMeta) -> Object {
    Object {
        key: Some(key.to_owned()),
        size: Some(o.size as i64),
        e_tag: Some(etag(&o.etag)),
        last_modified: Some(ts(o.modified_ms)),
        storage_class: Some(ObjectStorageClass::from(ObjectStorageClass::STANDARD.to_owned())),
        ..Default::default()
    }
}

impl StrataS3 {
    fn listing(
        &self,
        bucket: &str,
        prefix: Option<&str>,
        delimiter: Option<&str>,
        after: Option<&str>,
        max_keys: Option<i32>,
        encoding: Option<&EncodingType>,
    ) -> Result<Listed, S3Error> {
        let max = page_size(max_keys)?;
        let prefix = prefix.unwrap_or_default();
        let mut page = self.list_page(bucket, prefix, delimiter, after, max)?;
        if max == 0 {
            // S3 answers a page of no keys as complete, whatever follows.
            page.truncated = false;
            page.next = None;
        }
        let url = encoding.is_some_and(|e| e.as_str() == EncodingType::URL);
        let mut l = Listed {
            url,
            prefix: String::new(),
            delimiter: None,
            max: max as i32,
            truncated: page.truncated,
            next: page.next,
            contents: vec![],
            prefixes: vec![],
        };
        l.prefix = l.enc(prefix);
        l.delimiter = delimiter.map(|d| l.enc(d));
        l.contents = page.objects.iter().map(|(k, o)| object_out(&l.enc(k), o)).collect();
        l.prefixes = page.prefixes.iter().map(|p| CommonPrefix { prefix: Some(l.enc(p)) }).collect();
        Ok(l)
    }

    fn list_page(&self, bucket: &str, prefix: &str, delimiter: Option<&str>, after: Option<&str>, max: usize) -> Result<strata_names::ListPage, S3Error> {
        let now = self.now_ms();
        strata_names::read(&*self.names, |s| {
            let b = s.bucket(bucket).map_err(name_err)?;
            Ok(b.list(&ListQuery { prefix, delimiter, after, max, now_ms: now }))
        })
    }

    pub(super) fn do_list_objects_v2(&self, i: ListObjectsV2Input) -> S3Result<S3Response<ListObjectsV2Output>> {
        let token = i.continuation_token.as_deref().map(unb64).transpose()?;
        let after = token.as_deref().or(i.start_after.as_deref());
        let mut l = self.listing(&i.bucket, i.prefix.as_deref(), i.delimiter.as_deref(), after, i.max_keys, i.encoding_type.as_ref())?;
        if i.fetch_owner == Some(true) {
            l.contents.iter_mut().for_each(|o| o.owner = Some(owner()));
        }
        ok(ListObjectsV2Output {
            name: Some(i.bucket),
            key_count: Some((l.contents.len() + l.prefixes.len()) as i32),
            continuation_token: i.continuation_token,
            next_continuation_token: l.next.as_deref().map(b64),
            start_after: i.start_after.as_deref().map(|s| l.enc(s)),
            prefix: Some(l.prefix),
            delimiter: l.delimiter,
            max_keys: Some(l.max),
            is_truncated: Some(l.truncated),
            encoding_type: i.encoding_type,
            contents: Some(l.contents),
            common_prefixes: Some(l.prefixes),
            ..Default::default()
        })
    }

    pub(super) fn do_list_objects(&self, i: ListObjectsInput) -> S3Result<S3Response<ListObjectsOutput>> {
        let mut l = self.listing(&i.bucket, i.prefix.as_deref(), i.delimiter.as_deref(), i.marker.as_deref(), i.max_keys, i.encoding_type.as_ref())?;
        // Version 1 listings always name the owner.
        l.contents.iter_mut().for_each(|o| o.owner = Some(owner()));
        ok(ListObjectsOutput {
            name: Some(i.bucket),
            marker: Some(i.marker.as_deref().map(|m| l.enc(m)).unwrap_or_default()),
            next_marker: l.next.as_deref().map(|n| l.enc(n)),
            prefix: Some(l.prefix),
            delimiter: l.delimiter,
            max_keys: Some(l.max),
            is_truncated: Some(l.truncated),
            encoding_type: i.encoding_type,
            contents: Some(l.contents),
            common_prefixes: Some(l.prefixes),
            ..Default::default()
        })
    }

    /// Lists a bucket's versions and delete markers, each key's newest
    /// first (a bucket never versioned: each object as its `null` version,
    /// as S3 lists one). Tools that empty a bucket through this list
    /// (boto3's `object_versions.delete()`, Terraform's `force_destroy`,
    /// rclone `--s3-versions`) work on it.
    pub(super) fn do_list_object_versions(&self, i: ListObjectVersionsInput) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let max = page_size(i.max_keys)?;
        let prefix = i.prefix.clone().unwrap_or_default();
        let now = self.now_ms();
        let after = i.key_marker.as_deref().filter(|k| !k.is_empty());
        if i.version_id_marker.as_deref().is_some_and(|v| !v.is_empty()) && after.is_none() {
            return Err(s3_error!(InvalidArgument, "a version-id-marker needs a key-marker"));
        }
        let mut page = strata_names::read(&*self.names, |s| {
            s.bucket(&i.bucket).map_err(name_err)?;
            let q = ListQuery { prefix: &prefix, delimiter: i.delimiter.as_deref(), after, max, now_ms: now };
            Ok::<_, S3Error>(s.list_versions(&i.bucket, &q, i.version_id_marker.as_deref()))
        })?;
        if max == 0 {
            page.truncated = false;
            page.next = None;
        }
        let url = i.encoding_type.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL);
        let enc = |s: &str| if url { url_encode(s) } else { s.to_owned() };
        let (mut versions, mut markers) = (Vec::new(), Vec::new());
        for v in page.versions {
            match &v.object {
                Some(o) => versions.push(ObjectVersion {
                    key: Some(enc(&v.key)),
                    version_id: Some(v.id.clone()),
                    is_latest: Some(v.latest),
                    last_modified: Some(ts(o.modified_ms)),
                    e_tag: Some(etag(&o.etag)),
                    size: Some(o.size as i64),
                    storage_class: Some(ObjectVersionStorageClass::from(ObjectVersionStorageClass::STANDARD.to_owned())),
                    owner: Some(owner()),
                    ..Default::default()
                }),
                None => markers.push(DeleteMarkerEntry {
                    key: Some(enc(&v.key)),
                    version_id: Some(v.id.clone()),
                    is_latest: Some(v.latest),
                    last_modified: Some(ts(v.modified_ms)),
                    owner: Some(owner()),
                }),
            }
        }
        let (next_key, next_version) = match &page.next {
            Some((k, v)) => (Some(enc(k)), Some(v.clone()).filter(|v| !v.is_empty())),
            None => (None, None),
        };
        ok(ListObjectVersionsOutput {
            name: Some(i.bucket),
            prefix: Some(enc(&prefix)),
            delimiter: i.delimiter.as_deref().map(enc),
            max_keys: Some(max as i32),
            is_truncated: Some(page.truncated),
            key_marker: Some(i.key_marker.as_deref().map(enc).unwrap_or_default()),
            version_id_marker: Some(i.version_id_marker.unwrap_or_default()),
            next_key_marker: next_key,
            next_version_id_marker: next_version,
            encoding_type: i.encoding_type,
            versions: Some(versions),
            delete_markers: Some(markers),
            common_prefixes: Some(page.prefixes.iter().map(|p| CommonPrefix { prefix: Some(enc(p)) }).collect()),
            ..Default::default()
        })
    }
}

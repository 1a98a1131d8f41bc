//! Object tags (PutObjectTagging, GetObjectTagging, DeleteObjectTagging,
//! and `x-amz-tagging` on PutObject, CreateMultipartUpload and CopyObject).
//! Tools use them (the AWS CLI v2 copies a large object's tags with
//! GetObjectTagging and PutObjectTagging), and S3's rules hold: at most 10
//! per object, keys of 1 to 128 characters, values of at most 256, no key
//! twice, and no `aws:` prefix.
//!
//! Tags are stored in the object's metadata under names starting with
//! `/tag:` (internal names, see `convert::is_internal`), so a tag change is
//! one name op that rewrites the metadata of the same blob
//! (`NameOp::SetObjectMeta`).

use s3s::dto::{Tag, TagSet};
use s3s::{S3Error, s3_error};

const PREFIX: &str = "/tag:";
const TAGS_MAX: usize = 10;
const KEY_CHARS_MAX: usize = 128;
const VALUE_CHARS_MAX: usize = 256;

/// A bucket has at most this many tags.
const BUCKET_TAGS_MAX: usize = 50;

fn checked(pairs: Vec<(String, String)>) -> Result<Vec<(String, String)>, S3Error> {
    checked_up_to(pairs, TAGS_MAX, "an object")
}

fn checked_up_to(pairs: Vec<(String, String)>, max: usize, what: &str) -> Result<Vec<(String, String)>, S3Error> {
    if pairs.len() > max {
        return Err(s3_error!(InvalidTag, "{} tags given; {what} can have at most {max}", pairs.len()));
    }
    let mut out: Vec<(String, String)> = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        let n = k.chars().count();
        if n == 0 || n > KEY_CHARS_MAX {
            return Err(s3_error!(InvalidTag, "the tag key {k:?} has {n} characters; 1 to {KEY_CHARS_MAX} are allowed"));
        }
        if v.chars().count() > VALUE_CHARS_MAX {
            return Err(s3_error!(InvalidTag, "the value of tag {k:?} is over {VALUE_CHARS_MAX} characters"));
        }
        if k.to_ascii_lowercase().starts_with("aws:") {
            return Err(s3_error!(InvalidTag, "tag keys starting with aws: are reserved"));
        }
        let name = format!("{PREFIX}{k}");
        if out.iter().any(|(seen, _)| *seen == name) {
            return Err(s3_error!(InvalidTag, "the tag key {k:?} is given twice"));
        }
        out.push((name, v));
    }
    Ok(out)
}

/// The metadata entries for a PutObjectTagging body's tag set.
pub(crate) fn from_set(set: &TagSet) -> Result<Vec<(String, String)>, S3Error> {
    let pairs = set.iter().map(|t: &Tag| (t.key.clone().unwrap_or_default(), t.value.clone().unwrap_or_default())).collect();
    checked(pairs)
}

/// A bucket's tags (PutBucketTagging), checked, as stored entries.
pub(crate) fn bucket_from_set(set: &TagSet) -> Result<Vec<(String, String)>, S3Error> {
    let pairs = set.iter().map(|t: &Tag| (t.key.clone().unwrap_or_default(), t.value.clone().unwrap_or_default())).collect();
    checked_up_to(pairs, BUCKET_TAGS_MAX, "a bucket")
}

/// The metadata entries for an `x-amz-tagging` header (`k1=v1&k2=v2`,
/// URL-encoded); none for no header.
pub(crate) fn from_header(header: Option<&str>) -> Result<Vec<(String, String)>, S3Error> {
    let Some(h) = header else { return Ok(Vec::new()) };
    checked(form_urlencoded::parse(h.as_bytes()).map(|(k, v)| (k.into_owned(), v.into_owned())).collect())
}

/// Whether a metadata name stores a tag.
pub(crate) fn is_tag(name: &str) -> bool {
    name.starts_with(PREFIX)
}

/// The tags stored in `meta`.
pub(crate) fn to_set(meta: &[(String, String)]) -> TagSet {
    meta.iter().filter_map(|(k, v)| k.strip_prefix(PREFIX).map(|k| Tag { key: Some(k.to_owned()), value: Some(v.clone()) })).collect()
}

/// How many tags `meta` stores.
pub(crate) fn count(meta: &[(String, String)]) -> usize {
    meta.iter().filter(|(k, _)| is_tag(k)).count()
}

/// `meta` with its tags replaced by `tags`.
pub(crate) fn replaced(meta: &[(String, String)], tags: Vec<(String, String)>) -> Vec<(String, String)> {
    meta.iter().filter(|(k, _)| !is_tag(k)).cloned().chain(tags).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_sets_follow_s3s_rules() {
        let tags = from_header(Some("project=blue%20sky&empty=")).unwrap();
        assert_eq!(tags, [("/tag:project".to_owned(), "blue sky".to_owned()), ("/tag:empty".to_owned(), String::new())]);
        assert_eq!(to_set(&tags).len(), 2);
        assert!(from_header(None).unwrap().is_empty());
        let code = |r: Result<Vec<(String, String)>, S3Error>| r.unwrap_err().code().clone();
        assert_eq!(code(from_header(Some("a=1&a=2"))), s3s::S3ErrorCode::InvalidTag, "a key twice");
        assert_eq!(code(from_header(Some("aws:x=1"))), s3s::S3ErrorCode::InvalidTag);
        assert_eq!(code(from_header(Some("=1"))), s3s::S3ErrorCode::InvalidTag, "an empty key");
        let eleven = (0..11).map(|i| format!("k{i}=v")).collect::<Vec<_>>().join("&");
        assert_eq!(code(from_header(Some(&eleven))), s3s::S3ErrorCode::InvalidTag);
        let long = format!("k={}", "v".repeat(257));
        assert_eq!(code(from_header(Some(&long))), s3s::S3ErrorCode::InvalidTag);
        let meta = vec![("color".to_owned(), "red".to_owned()), ("/tag:old".to_owned(), "x".to_owned())];
        let new = replaced(&meta, tags);
        assert_eq!(count(&new), 2);
        assert_eq!(new[0], ("color".to_owned(), "red".to_owned()));
        assert!(!new.iter().any(|(k, _)| k == "/tag:old"));
    }
}

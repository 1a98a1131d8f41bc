//! The standard headers S3 stores with an object and returns on GET and
//! HEAD: Cache-Control, Content-Disposition, Content-Encoding (less
//! `aws-chunked`, which describes only the upload's framing),
//! Content-Language and Expires. They live in the object's metadata under
//! internal names (`/h:<header>`, see [`crate::convert::is_internal`]), so
//! the name index's formats do not change.

use s3s::dto::{Timestamp, TimestampFormat};

const PREFIX: &str = "/h:";
const CACHE_CONTROL: &str = "/h:cache-control";
const CONTENT_DISPOSITION: &str = "/h:content-disposition";
const CONTENT_ENCODING: &str = "/h:content-encoding";
const CONTENT_LANGUAGE: &str = "/h:content-language";
const EXPIRES: &str = "/h:expires";

/// An object's standard headers.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Standard {
    pub cache_control: Option<String>,
    pub content_disposition: Option<String>,
    pub content_encoding: Option<String>,
    pub content_language: Option<String>,
    /// As an HTTP date.
    pub expires: Option<String>,
}

/// The [`Standard`] headers of a request input that carries all five
/// (PutObject, CopyObject, CreateMultipartUpload).
macro_rules! standard_headers_in {
    ($i:expr) => {
        crate::headers::Standard::new(
            $i.cache_control.clone(),
            $i.content_disposition.clone(),
            $i.content_encoding.clone(),
            $i.content_language.clone(),
            $i.expires.as_ref(),
        )
    };
}
pub(crate) use standard_headers_in;

fn http_date(t: &Timestamp) -> Option<String> {
    let mut out = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut out).ok()?;
    String::from_utf8(out).ok()
}

impl Standard {
    /// The headers as a client sent them: empty values dropped, and
    /// `aws-chunked` taken out of Content-Encoding.
    pub fn new(
        cache_control: Option<String>,
        content_disposition: Option<String>,
        content_encoding: Option<String>,
        content_language: Option<String>,
        expires: Option<&Timestamp>,
    ) -> Self {
        let some = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
        let content_encoding = content_encoding
            .map(|e| e.split(',').map(str::trim).filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("aws-chunked")).collect::<Vec<_>>().join(", "));
        Self {
            cache_control: some(cache_control),
            content_disposition: some(content_disposition),
            content_encoding: some(content_encoding),
            content_language: some(content_language),
            expires: expires.and_then(http_date),
        }
    }

    /// The headers stored in `meta`.
    pub fn of(meta: &[(String, String)]) -> Self {
        let get = |name: &str| meta.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        Self {
            cache_control: get(CACHE_CONTROL),
            content_disposition: get(CONTENT_DISPOSITION),
            content_encoding: get(CONTENT_ENCODING),
            content_language: get(CONTENT_LANGUAGE),
            expires: get(EXPIRES),
        }
    }

    /// Adds the headers to `meta`, in place of any stored there before.
    pub fn store_in(self, meta: &mut Vec<(String, String)>) {
        meta.retain(|(k, _)| !k.starts_with(PREFIX));
        for (name, value) in [
            (CACHE_CONTROL, self.cache_control),
            (CONTENT_DISPOSITION, self.content_disposition),
            (CONTENT_ENCODING, self.content_encoding),
            (CONTENT_LANGUAGE, self.content_language),
            (EXPIRES, self.expires),
        ] {
            if let Some(v) = value {
                meta.push((name.to_owned(), v));
            }
        }
    }

    /// Expires as S3's output type (a stored date that no longer parses is
    /// left out rather than failing the read).
    pub fn expires_out(&self) -> Option<Timestamp> {
        self.expires.as_deref().and_then(|d| Timestamp::parse(TimestampFormat::HttpDate, d).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_through_metadata_and_aws_chunked_is_dropped() {
        let when = Timestamp::parse(TimestampFormat::HttpDate, "Wed, 21 Oct 2026 07:28:00 GMT").unwrap();
        let h = Standard::new(
            Some("max-age=60".into()),
            Some("attachment; filename=\"a.txt\"".into()),
            Some("aws-chunked, gzip".into()),
            Some("fr".into()),
            Some(&when),
        );
        assert_eq!(h.content_encoding.as_deref(), Some("gzip"));
        let mut meta = vec![("color".to_owned(), "blue".to_owned()), ("/h:cache-control".to_owned(), "old".to_owned())];
        h.clone().store_in(&mut meta);
        assert_eq!(Standard::of(&meta), h);
        assert_eq!(meta.iter().filter(|(k, _)| k == "/h:cache-control").count(), 1);
        assert_eq!(h.expires_out(), Some(when));
        assert_eq!(crate::convert::meta_out(&meta).map(|m| m.len()), Some(1), "the headers are not user metadata");
        assert_eq!(Standard::new(None, Some(" ".into()), Some("aws-chunked".into()), None, None), Standard::default());
    }
}

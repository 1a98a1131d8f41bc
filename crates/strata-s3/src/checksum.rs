//! S3's additional checksums (`x-amz-checksum-crc32`, `-crc32c`,
//! `-crc64nvme`, `-sha1`, `-sha256`): current SDKs send one with every
//! upload, beside or instead of Content-MD5, either as a header or as a
//! trailer after an aws-chunked body (`x-amz-trailer` names it). Each one a
//! request carries is computed over the body as it arrives and compared at
//! the end; a mismatch is BadDigest and the upload changes nothing.
//!
//! The checksums a single PUT carried are stored with the object, in its
//! metadata under internal names (`convert::is_internal`), and GetObject and
//! HeadObject return them when asked (`x-amz-checksum-mode: ENABLED`), so
//! a client can check what it downloads end to end. Multipart objects
//! store none (S3's are composite checksums of the parts).

use s3s::checksum::ChecksumHasher;
use s3s::crypto::Checksum as _;
use s3s::dto::Checksum;
use s3s::{S3Error, TrailingHeaders, s3_error};

/// The checksums an upload's input carries (its `checksum_*` fields).
macro_rules! given_checksums {
    ($input:expr) => {
        s3s::dto::Checksum {
            checksum_crc32: $input.checksum_crc32,
            checksum_crc32c: $input.checksum_crc32c,
            checksum_crc64nvme: $input.checksum_crc64nvme,
            checksum_sha1: $input.checksum_sha1,
            checksum_sha256: $input.checksum_sha256,
            checksum_type: None,
        }
    };
}

/// An upload's output echoing the checksums checked (`$sums`).
macro_rules! with_checksums {
    ($out:ident { $($field:ident: $value:expr),* $(,)? }, $sums:expr) => {{
        let c: s3s::dto::Checksum = $sums;
        $out {
            checksum_crc32: c.checksum_crc32,
            checksum_crc32c: c.checksum_crc32c,
            checksum_crc64nvme: c.checksum_crc64nvme,
            checksum_sha1: c.checksum_sha1,
            checksum_sha256: c.checksum_sha256,
            $($field: $value,)*
            ..Default::default()
        }
    }};
}
pub(crate) use {given_checksums, with_checksums};

/// The algorithms, with their header names.
const ALGOS: [(&str, &str); 5] = [
    ("CRC32", "x-amz-checksum-crc32"),
    ("CRC32C", "x-amz-checksum-crc32c"),
    ("CRC64NVME", "x-amz-checksum-crc64nvme"),
    ("SHA1", "x-amz-checksum-sha1"),
    ("SHA256", "x-amz-checksum-sha256"),
];

/// The checksums a request says its body has.
#[derive(Default)]
pub(crate) struct Expected {
    /// Given as headers.
    given: Checksum,
    /// Announced by `x-amz-trailer` (an index into [`ALGOS`]), with the
    /// handle the trailer is read from once the body is consumed.
    trailer: Option<(usize, TrailingHeaders)>,
}

fn slot(c: &mut Checksum, algo: usize) -> &mut Option<String> {
    match algo {
        0 => &mut c.checksum_crc32,
        1 => &mut c.checksum_crc32c,
        2 => &mut c.checksum_crc64nvme,
        3 => &mut c.checksum_sha1,
        _ => &mut c.checksum_sha256,
    }
}

impl Expected {
    /// From a request's checksum headers (`given`, as s3s parsed them) and
    /// its `x-amz-trailer` header.
    pub fn new(given: Checksum, headers: &http::HeaderMap, trailers: Option<TrailingHeaders>) -> Result<Self, S3Error> {
        let trailer = match headers.get("x-amz-trailer") {
            None => None,
            Some(v) => {
                let name = v.to_str().unwrap_or("").trim().to_ascii_lowercase();
                let algo = ALGOS.iter().position(|(_, h)| *h == name);
                let algo = algo.ok_or_else(|| s3_error!(InvalidRequest, "x-amz-trailer {name:?} is not a checksum Strata knows"))?;
                let handle = trailers.ok_or_else(|| s3_error!(InvalidRequest, "x-amz-trailer needs an aws-chunked body"))?;
                Some((algo, handle))
            }
        };
        Ok(Self { given, trailer })
    }

    fn wanted(&self, algo: usize) -> bool {
        let given =
            [&self.given.checksum_crc32, &self.given.checksum_crc32c, &self.given.checksum_crc64nvme, &self.given.checksum_sha1, &self.given.checksum_sha256];
        given[algo].is_some() || self.trailer.as_ref().is_some_and(|(a, _)| *a == algo)
    }

    /// A hasher for the algorithms expected, if any.
    pub fn hasher(&self) -> Option<ChecksumHasher> {
        let mut h = ChecksumHasher::default();
        let mut any = false;
        for algo in (0..ALGOS.len()).filter(|a| self.wanted(*a)) {
            any = true;
            match algo {
                0 => h.crc32 = Some(s3s::crypto::Crc32::new()),
                1 => h.crc32c = Some(s3s::crypto::Crc32c::new()),
                2 => h.crc64nvme = Some(s3s::crypto::Crc64Nvme::new()),
                3 => h.sha1 = Some(s3s::crypto::Sha1::new()),
                _ => h.sha256 = Some(s3s::crypto::Sha256::new()),
            }
        }
        any.then_some(h)
    }

    /// Compares what the body hashed to (`computed`, from [`Self::hasher`])
    /// with what the request said; returns the checksums checked.
    pub fn check(&self, mut computed: Checksum) -> Result<Checksum, S3Error> {
        let mut want = self.given.clone();
        if let Some((algo, handle)) = &self.trailer {
            let value = handle.read(|h| h.get(ALGOS[*algo].1).and_then(|v| v.to_str().ok()).map(str::to_owned)).flatten();
            let value = value.ok_or_else(|| s3_error!(InvalidRequest, "the body ended without its {} trailer", ALGOS[*algo].1))?;
            *slot(&mut want, *algo) = Some(value);
        }
        let mut checked = Checksum::default();
        for (algo, (name, _)) in ALGOS.iter().enumerate() {
            if let Some(w) = slot(&mut want, algo).take() {
                let got = slot(&mut computed, algo).take().unwrap_or_default();
                if got != w.trim() {
                    return Err(s3_error!(BadDigest, "the {name} you specified did not match the calculated checksum"));
                }
                *slot(&mut checked, algo) = Some(got);
            }
        }
        Ok(checked)
    }
}

/// Names of stored checksums in an object's metadata, in [`ALGOS`] order.
const STORED: [&str; 5] = ["/checksum-crc32", "/checksum-crc32c", "/checksum-crc64nvme", "/checksum-sha1", "/checksum-sha256"];

/// The metadata entries that store `sums`.
pub(crate) fn to_meta(mut sums: Checksum) -> Vec<(String, String)> {
    (0..ALGOS.len()).filter_map(|algo| slot(&mut sums, algo).take().map(|v| (STORED[algo].to_owned(), v))).collect()
}

/// The checksums stored in `meta`.
pub(crate) fn from_meta(meta: &[(String, String)]) -> Checksum {
    let mut sums = Checksum::default();
    for (name, value) in meta {
        if let Some(algo) = STORED.iter().position(|s| s == name) {
            *slot(&mut sums, algo) = Some(value.clone());
        }
    }
    sums
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crc32_of(data: &[u8]) -> String {
        let mut h = Expected { given: Checksum { checksum_crc32: Some(String::new()), ..Default::default() }, trailer: None }.hasher().unwrap();
        h.update(data);
        h.finalize().checksum_crc32.unwrap()
    }

    #[test]
    fn matching_checksums_pass_and_others_are_bad_digests() {
        // CRC32 of "hello" is 0x3610a686.
        assert_eq!(crc32_of(b"hello"), "NhCmhg==");
        let exp = Expected { given: Checksum { checksum_crc32: Some("NhCmhg==".into()), ..Default::default() }, trailer: None };
        let mut h = exp.hasher().unwrap();
        h.update(b"hel");
        h.update(b"lo");
        assert_eq!(exp.check(h.finalize()).unwrap().checksum_crc32.as_deref(), Some("NhCmhg=="));
        let mut h = exp.hasher().unwrap();
        h.update(b"hellO");
        assert_eq!(exp.check(h.finalize()).unwrap_err().code(), &s3s::S3ErrorCode::BadDigest);
        assert!(Expected::default().hasher().is_none(), "nothing to compute without checksums");
    }

    #[test]
    fn stored_checksums_round_trip_through_metadata() {
        let sums = Checksum { checksum_crc32: Some("NhCmhg==".into()), checksum_sha256: Some("abc=".into()), ..Default::default() };
        let meta = to_meta(sums.clone());
        assert!(meta.iter().all(|(k, _)| crate::convert::is_internal(k)));
        let mut with_user = vec![("color".to_owned(), "blue".to_owned())];
        with_user.extend(meta);
        assert_eq!(from_meta(&with_user), sums);
    }

    #[test]
    fn unknown_trailers_are_refused() {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-amz-trailer", http::HeaderValue::from_static("x-amz-checksum-md4"));
        assert!(Expected::new(Checksum::default(), &headers, None).is_err());
    }
}

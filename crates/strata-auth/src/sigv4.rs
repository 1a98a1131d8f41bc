//! AWS Signature Version 4, the one signing scheme of every Strata client:
//! the S3 port (whose protocol crate verifies it there) and the node's HTTP
//! port (native blobs, read-only stores, administration), where this module
//! verifies it. One signer serves the CLI, the Rust client, `curl
//! --aws-sigv4` and any AWS SDK's SigV4 signer.
//!
//! Sans I/O: a request is a [`RequestView`] of borrowed parts (so the
//! connection loop's fast path can check a head straight from its parse
//! buffer), the time is a parameter, and the secret reaches [`verify`] as a
//! derived [`SigningKey`] the caller may cache per key and day.
//!
//! What is checked, in order: the algorithm; the credential scope (date,
//! region, service, terminator); the request time (within 15 minutes of the
//! server's clock, or for a presigned URL not yet expired and valid for at
//! most seven days); that `host` is signed; the signature (compared in
//! constant time). The payload hash is what `x-amz-content-sha256` says:
//! `UNSIGNED-PAYLOAD`, or a SHA-256 the caller must check against the body
//! as it arrives ([`Payload::Sha256`]). A request with a body must carry
//! that header; a presigned URL is always unsigned-payload, as S3's are.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// The only algorithm accepted.
pub const ALGORITHM: &str = "AWS4-HMAC-SHA256";
/// The payload hash of a request whose body is not signed.
pub const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// SHA-256 of the empty string: the payload hash of a request without a body.
pub const EMPTY_PAYLOAD_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// Longest validity of a presigned URL (S3's limit: seven days).
pub const PRESIGNED_EXPIRES_MAX_SECS: u64 = 7 * 24 * 3600;
/// How far a signed request's time may be from the server's (S3's 15 minutes).
pub const CLOCK_SKEW_MAX_SECS: u64 = 15 * 60;

type HmacSha256 = Hmac<Sha256>;

/// Why a signature was refused. Each has a stable code ([`SigError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    /// A part of the signature is missing or unreadable.
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// Which part.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// Another algorithm than AWS4-HMAC-SHA256.
    #[error("unsupported signature algorithm {0:?}: sign with AWS4-HMAC-SHA256")]
    Algorithm(String),
    /// The credential scope names another region.
    #[error("the credential scope's region {got:?} is wrong; expecting {want:?}")]
    Region {
        /// The region signed for.
        got: String,
        /// This server's region.
        want: String,
    },
    /// The credential scope names another service.
    #[error("the credential scope's service {got:?} is wrong; expecting {want:?}")]
    Service {
        /// The service signed for.
        got: String,
        /// The service this port verifies.
        want: String,
    },
    /// The request's time is too far from the server's.
    #[error("the request time {amz_date} is more than 15 minutes away from the server's time: check the client's clock")]
    Skewed {
        /// The request's `x-amz-date`.
        amz_date: String,
    },
    /// A presigned URL past its expiry.
    #[error("the presigned URL expired {ago_secs} s ago")]
    Expired {
        /// Seconds since it expired.
        ago_secs: u64,
    },
    /// `X-Amz-Expires` outside 1 s to seven days.
    #[error("X-Amz-Expires must be a number of seconds from 1 to 604800 (seven days), not {0:?}")]
    ExpiresOutOfRange(String),
    /// A required header is not among the signed ones.
    #[error("the {0} header must be signed")]
    UnsignedHeader(&'static str),
    /// A request with a body and no `x-amz-content-sha256`.
    #[error("a signed request with a body needs x-amz-content-sha256 (UNSIGNED-PAYLOAD or the body's SHA-256 in hex)")]
    PayloadHashRequired,
    /// The signature does not match.
    #[error("the signature does not match: check the secret access key and the signing method")]
    Mismatch,
}

impl SigError {
    /// The stable code of the error (S3's where S3 has one).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed { .. } | Self::Algorithm(_) | Self::Region { .. } | Self::Service { .. } => "AuthorizationHeaderMalformed",
            Self::Skewed { .. } => "RequestTimeTooSkewed",
            Self::Expired { .. } => "RequestExpired",
            Self::ExpiresOutOfRange(_) => "AuthorizationQueryParametersError",
            Self::UnsignedHeader(_) | Self::PayloadHashRequired => "InvalidRequest",
            Self::Mismatch => "SignatureDoesNotMatch",
        }
    }
}

fn malformed(what: &'static str, detail: impl Into<String>) -> SigError {
    SigError::Malformed { what, detail: detail.into() }
}

/// A request as the verifier sees it: borrowed parts, as they came off the wire.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// `GET`, `PUT`, ...
    pub method: &'a str,
    /// The path as sent (percent-encoded), without the query.
    pub path: &'a str,
    /// The query as sent, without the `?` ("" if none).
    pub query: &'a str,
    /// Every header, names in any case.
    pub headers: &'a [(&'a str, &'a [u8])],
}

impl<'a> RequestView<'a> {
    /// The values of header `name` (case-insensitive), in order.
    fn header_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'a [u8]> + 's {
        self.headers.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    }

    fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| *v)
    }

    /// Whether the request carries a body (a non-zero length or chunked).
    fn has_body(&self) -> bool {
        self.header("transfer-encoding").is_some() || self.header("content-length").is_some_and(|v| v.iter().any(|b| *b != b'0'))
    }
}

/// What a signed request claims: who signed it, for which scope, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The access key id.
    pub access_key_id: String,
    /// The scope's date, `YYYYMMDD`.
    pub date: String,
    /// The scope's region.
    pub region: String,
    /// The scope's service.
    pub service: String,
    /// The signed headers, lower case, as listed.
    pub signed_headers: Vec<String>,
    /// The signature, hex.
    pub signature: String,
    /// The request time, `YYYYMMDDTHHMMSSZ`.
    pub amz_date: String,
    /// A presigned URL's validity in seconds (`None` for header auth).
    pub expires_secs: Option<u64>,
}

/// What the signature says of the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// Not signed (`UNSIGNED-PAYLOAD`, a presigned URL, or no body).
    Unsigned,
    /// The body's SHA-256 as signed: the caller must compare it with the
    /// body and refuse the request if they differ.
    Sha256([u8; 32]),
}

/// The key derived from a secret for one day, region and service
/// (`kSigning` of the specification); cacheable for that scope.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey([u8; 32]);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(..)")
    }
}

fn hmac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(msg);
    m.finalize().into_bytes().into()
}

impl SigningKey {
    /// Derives the key of `secret` for `date` (`YYYYMMDD`), `region` and `service`.
    pub fn derive(secret: &str, date: &str, region: &str, service: &str) -> Self {
        let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
        let k_region = hmac(&k_date, region.as_bytes());
        let k_service = hmac(&k_region, service.as_bytes());
        Self(hmac(&k_service, b"aws4_request"))
    }

    fn sign(&self, string_to_sign: &str) -> [u8; 32] {
        hmac(&self.0, string_to_sign.as_bytes())
    }

    /// Compares in constant time.
    fn verify(&self, string_to_sign: &str, signature: &[u8]) -> bool {
        let mut m = <HmacSha256 as KeyInit>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        m.update(string_to_sign.as_bytes());
        m.verify_slice(signature).is_ok()
    }
}

/// Reads the signature a request carries: an `Authorization` header, or a
/// presigned URL's `X-Amz-*` query parameters. `Ok(None)`: not signed.
pub fn claim(req: &RequestView<'_>) -> Result<Option<Claim>, SigError> {
    if let Some(auth) = req.header("authorization") {
        return header_claim(req, auth).map(Some);
    }
    if req.query.split('&').any(|p| p.starts_with("X-Amz-Signature=")) {
        return presigned_claim(req.query).map(Some);
    }
    Ok(None)
}

fn utf8<'a>(what: &'static str, b: &'a [u8]) -> Result<&'a str, SigError> {
    std::str::from_utf8(b).map_err(|_| malformed(what, "not UTF-8"))
}

/// `KEY/YYYYMMDD/REGION/SERVICE/aws4_request`.
fn parse_credential(c: &str) -> Result<(String, String, String, String), SigError> {
    let parts: Vec<&str> = c.split('/').collect();
    let [key, date, region, service, terminator] = parts[..] else {
        return Err(malformed("credential", "expected KEY/YYYYMMDD/REGION/SERVICE/aws4_request"));
    };
    if terminator != "aws4_request" {
        return Err(malformed("credential", format!("the scope must end with aws4_request, not {terminator:?}")));
    }
    if key.is_empty() {
        return Err(malformed("credential", "no access key id"));
    }
    if date.len() != 8 || !date.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed("credential", format!("the scope's date {date:?} is not YYYYMMDD")));
    }
    Ok((key.to_owned(), date.to_owned(), region.to_owned(), service.to_owned()))
}

fn signed_header_list(s: &str) -> Result<Vec<String>, SigError> {
    let list: Vec<String> = s.split(';').map(str::to_ascii_lowercase).collect();
    if list.iter().any(String::is_empty) {
        return Err(malformed("SignedHeaders", format!("{s:?} has an empty name")));
    }
    Ok(list)
}

fn header_claim(req: &RequestView<'_>, auth: &[u8]) -> Result<Claim, SigError> {
    let auth = utf8("Authorization", auth)?;
    let (algorithm, rest) =
        auth.trim().split_once(' ').ok_or_else(|| malformed("Authorization", "expected AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=..."))?;
    if algorithm != ALGORITHM {
        return Err(SigError::Algorithm(algorithm.chars().take(40).collect()));
    }
    let (mut credential, mut signed, mut signature) = (None, None, None);
    for part in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('=') {
            Some(("Credential", v)) => credential = Some(v),
            Some(("SignedHeaders", v)) => signed = Some(v),
            Some(("Signature", v)) => signature = Some(v),
            _ => return Err(malformed("Authorization", format!("unknown part {:?}", part.chars().take(40).collect::<String>()))),
        }
    }
    let credential = credential.ok_or_else(|| malformed("Authorization", "no Credential"))?;
    let (access_key_id, date, region, service) = parse_credential(credential)?;
    let signed_headers = signed_header_list(signed.ok_or_else(|| malformed("Authorization", "no SignedHeaders"))?)?;
    let signature = signature.ok_or_else(|| malformed("Authorization", "no Signature"))?.to_owned();
    let amz_date =
        utf8("x-amz-date", req.header("x-amz-date").ok_or_else(|| malformed("x-amz-date", "missing: a signed request carries its time"))?)?.to_owned();
    Ok(Claim { access_key_id, date, region, service, signed_headers, signature, amz_date, expires_secs: None })
}

fn presigned_claim(query: &str) -> Result<Claim, SigError> {
    let mut params = std::collections::BTreeMap::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k.starts_with("X-Amz-") {
            params.insert(k, percent_decode(v).ok_or_else(|| malformed("query", format!("bad percent-encoding in {k}")))?);
        }
    }
    let get = |k: &'static str| params.get(k).cloned().ok_or_else(|| malformed("presigned URL", format!("no {k}")));
    let algorithm = get("X-Amz-Algorithm")?;
    if algorithm != ALGORITHM {
        return Err(SigError::Algorithm(algorithm.chars().take(40).collect()));
    }
    let (access_key_id, date, region, service) = parse_credential(&get("X-Amz-Credential")?)?;
    let expires = get("X-Amz-Expires")?;
    let expires_secs = match expires.parse::<u64>() {
        Ok(s) if (1..=PRESIGNED_EXPIRES_MAX_SECS).contains(&s) => s,
        _ => return Err(SigError::ExpiresOutOfRange(expires.chars().take(40).collect())),
    };
    Ok(Claim {
        access_key_id,
        date,
        region,
        service,
        signed_headers: signed_header_list(&get("X-Amz-SignedHeaders")?)?,
        signature: get("X-Amz-Signature")?,
        amz_date: get("X-Amz-Date")?,
        expires_secs: Some(expires_secs),
    })
}

/// Checks `claim` against the request it came from, with the signing key
/// derived from the claimed key's secret for the claim's scope
/// ([`SigningKey::derive`] with `claim.date`, `region`, `service`), at
/// `now_secs` (seconds since the epoch). On success, says whether the
/// body's hash must still be checked.
pub fn verify(claim: &Claim, req: &RequestView<'_>, key: &SigningKey, scope: Scope<'_>, now_secs: u64) -> Result<Payload, SigError> {
    let Scope { region, service } = scope;
    if claim.region != region {
        return Err(SigError::Region { got: claim.region.chars().take(64).collect(), want: region.to_owned() });
    }
    if claim.service != service {
        return Err(SigError::Service { got: claim.service.chars().take(64).collect(), want: service.to_owned() });
    }
    let t = parse_amz_date(&claim.amz_date).ok_or_else(|| malformed("request time", format!("{:?} is not YYYYMMDDTHHMMSSZ", claim.amz_date)))?;
    if claim.amz_date[..8] != claim.date {
        return Err(malformed("credential", "the scope's date is not the request's date"));
    }
    match claim.expires_secs {
        None if t.abs_diff(now_secs) > CLOCK_SKEW_MAX_SECS => return Err(SigError::Skewed { amz_date: claim.amz_date.clone() }),
        None => {}
        Some(_) if t > now_secs + CLOCK_SKEW_MAX_SECS => return Err(SigError::Skewed { amz_date: claim.amz_date.clone() }),
        Some(e) if now_secs > t + e => return Err(SigError::Expired { ago_secs: now_secs - (t + e) }),
        Some(_) => {}
    }
    if !claim.signed_headers.iter().any(|h| h == "host") {
        return Err(SigError::UnsignedHeader("host"));
    }
    let (payload_text, payload) = match (claim.expires_secs, req.header("x-amz-content-sha256")) {
        (Some(_), _) => (UNSIGNED_PAYLOAD.to_owned(), Payload::Unsigned),
        (None, Some(v)) => {
            let v = utf8("x-amz-content-sha256", v)?;
            if v == UNSIGNED_PAYLOAD {
                (v.to_owned(), Payload::Unsigned)
            } else {
                let mut h = [0u8; 32];
                hex::decode_to_slice(v, &mut h)
                    .map_err(|_| malformed("x-amz-content-sha256", "expected UNSIGNED-PAYLOAD or 64 hex digits (streaming payloads are for the S3 port)"))?;
                (v.to_ascii_lowercase(), if v == EMPTY_PAYLOAD_SHA256 { Payload::Unsigned } else { Payload::Sha256(h) })
            }
        }
        (None, None) if req.has_body() => return Err(SigError::PayloadHashRequired),
        (None, None) => (EMPTY_PAYLOAD_SHA256.to_owned(), Payload::Unsigned),
    };
    let canonical = canonical_request(req, &claim.signed_headers, &payload_text, claim.expires_secs.is_some())?;
    let to_sign = string_to_sign(&claim.amz_date, &claim.date, region, service, &canonical);
    let mut signature = [0u8; 32];
    if hex::decode_to_slice(&claim.signature, &mut signature).is_err() || !key.verify(&to_sign, &signature) {
        return Err(SigError::Mismatch);
    }
    Ok(payload)
}

fn string_to_sign(amz_date: &str, date: &str, region: &str, service: &str, canonical: &str) -> String {
    let digest: [u8; 32] = Sha256::digest(canonical.as_bytes()).into();
    // Pushed piece by piece: this runs for every request on both ends.
    let mut out = String::with_capacity(ALGORITHM.len() + amz_date.len() + date.len() + region.len() + service.len() + 96);
    for part in [ALGORITHM, "\n", amz_date, "\n", date, "/", region, "/", service, "/aws4_request\n"] {
        out.push_str(part);
    }
    push_hex(&mut out, &digest);
    out
}

/// Appends `bytes` as lower-case hex.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 15)] as char);
    }
}

fn hex32(bytes: &[u8; 32]) -> String {
    let mut s = String::with_capacity(64);
    push_hex(&mut s, bytes);
    s
}

/// The canonical request of the specification. With `presigned`, the
/// query's `X-Amz-Signature` is left out.
fn canonical_request(req: &RequestView<'_>, signed: &[String], payload: &str, presigned: bool) -> Result<String, SigError> {
    let mut out = String::with_capacity(256);
    out.push_str(req.method);
    out.push('\n');
    let path = percent_decode_cow(req.path).ok_or_else(|| malformed("path", "bad percent-encoding"))?;
    uri_encode_into(&mut out, if path.is_empty() { "/" } else { &path }, false);
    out.push('\n');
    out.push_str(&canonical_query(req.query, presigned)?);
    out.push('\n');
    for name in signed {
        out.push_str(name);
        out.push(':');
        let mut first = true;
        let mut any = false;
        for v in req.header_values(name) {
            any = true;
            if !first {
                out.push(',');
            }
            first = false;
            push_trimmed(&mut out, utf8("signed header", v)?);
        }
        if !any {
            return Err(malformed("SignedHeaders", format!("{name} is signed but not sent")));
        }
        out.push('\n');
    }
    out.push('\n');
    out.push_str(&signed.join(";"));
    out.push('\n');
    out.push_str(payload);
    Ok(out)
}

/// A header value trimmed, with runs of spaces made one.
fn push_trimmed(out: &mut String, v: &str) {
    let mut space = false;
    for c in v.trim().chars() {
        if c == ' ' {
            if !space {
                out.push(' ');
            }
            space = true;
        } else {
            out.push(c);
            space = false;
        }
    }
}

fn canonical_query(query: &str, presigned: bool) -> Result<String, SigError> {
    if query.is_empty() {
        return Ok(String::new());
    }
    let mut pairs = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if presigned && k == "X-Amz-Signature" {
            continue;
        }
        let bad = || malformed("query", "bad percent-encoding");
        let (k, v) = (percent_decode(k).ok_or_else(bad)?, percent_decode(v).ok_or_else(bad)?);
        let (mut ek, mut ev) = (String::new(), String::new());
        uri_encode_into(&mut ek, &k, true);
        uri_encode_into(&mut ev, &v, true);
        pairs.push((ek, ev));
    }
    pairs.sort();
    Ok(pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&"))
}

/// Percent-encodes everything but the unreserved characters (and `/` in a
/// path), upper-case hex, as the specification says.
pub fn uri_encode_into(out: &mut String, s: &str, encode_slash: bool) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let keep = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') || (b == b'/' && !encode_slash);
    if s.bytes().all(keep) {
        out.push_str(s);
        return;
    }
    for b in s.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(b >> 4)] as char);
            out.push(HEX[usize::from(b & 15)] as char);
        }
    }
}

/// Decodes `%XX` escapes; `None` for a broken escape or bytes that are not
/// UTF-8. (A `+` stays a `+`.)
pub fn percent_decode(s: &str) -> Option<String> {
    percent_decode_cow(s).map(std::borrow::Cow::into_owned)
}

/// [`percent_decode`], borrowing when there is nothing to decode.
fn percent_decode_cow(s: &str) -> Option<std::borrow::Cow<'_, str>> {
    if !s.contains('%') {
        return Some(std::borrow::Cow::Borrowed(s));
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok().map(std::borrow::Cow::Owned)
}

/// An access key id and its secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The public id.
    pub access_key_id: String,
    /// The secret (never logged: `Debug` hides it).
    pub secret_access_key: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("access_key_id", &self.access_key_id).field("secret_access_key", &"<hidden>").finish()
    }
}

/// The headers a signed request must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// `Authorization`.
    pub authorization: String,
    /// `x-amz-date`.
    pub amz_date: String,
    /// `x-amz-content-sha256`.
    pub content_sha256: String,
}

/// Where a signature is valid: a region and a service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope<'a> {
    /// The region (the server's `--region`).
    pub region: &'a str,
    /// The service ([`crate::SERVICE`]).
    pub service: &'a str,
}

/// Signs a request: `req.headers` are the headers to sign (they must
/// include `host`; `x-amz-date` and `x-amz-content-sha256` are added), its
/// path and query as they will be sent; `payload` is [`UNSIGNED_PAYLOAD`]
/// or the body's SHA-256 in hex.
pub fn sign(req: &RequestView<'_>, payload: &str, creds: &Credentials, scope: Scope<'_>, now_secs: u64) -> Signature {
    let date = &amz_date(now_secs)[..8];
    let key = SigningKey::derive(&creds.secret_access_key, date, scope.region, scope.service);
    sign_with(req, payload, &creds.access_key_id, &key, scope, now_secs)
}

fn sign_with(req: &RequestView<'_>, payload: &str, access_key_id: &str, key: &SigningKey, scope: Scope<'_>, now_secs: u64) -> Signature {
    let Scope { region, service } = scope;
    let amz_date = amz_date(now_secs);
    let date = &amz_date[..8];
    let mut all: Vec<(String, &[u8])> = req.headers.iter().map(|(n, v)| (n.to_ascii_lowercase(), *v)).collect();
    all.retain(|(n, _)| n != "x-amz-date" && n != "x-amz-content-sha256" && n != "authorization");
    all.push(("x-amz-date".into(), amz_date.as_bytes()));
    all.push(("x-amz-content-sha256".into(), payload.as_bytes()));
    let mut names: Vec<String> = all.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    names.dedup();
    let view_headers: Vec<(&str, &[u8])> = all.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let view = RequestView { headers: &view_headers, ..*req };
    // The request is ours: every signed name is present and UTF-8 unless
    // the caller passed bytes that are not, which only a test does.
    let canonical = canonical_request(&view, &names, payload, false).unwrap_or_default();
    let signature = hex32(&key.sign(&string_to_sign(&amz_date, date, region, service, &canonical)));
    let authorization =
        format!("{ALGORITHM} Credential={access_key_id}/{date}/{region}/{service}/aws4_request, SignedHeaders={}, Signature={signature}", names.join(";"));
    Signature { authorization, amz_date, content_sha256: payload.to_owned() }
}

/// A presigned URL's query (to append after `?`) for `req` (its `host`
/// header is the one signed; its query, if any, is kept), valid
/// `expires_secs` from `now_secs`.
pub fn presign(req: &RequestView<'_>, creds: &Credentials, scope: Scope<'_>, now_secs: u64, expires_secs: u64) -> String {
    let Scope { region, service } = scope;
    let amz_date = amz_date(now_secs);
    let date = &amz_date[..8];
    let mut credential = String::new();
    uri_encode_into(&mut credential, &format!("{}/{date}/{region}/{service}/aws4_request", creds.access_key_id), true);
    let mut q =
        format!("X-Amz-Algorithm={ALGORITHM}&X-Amz-Credential={credential}&X-Amz-Date={amz_date}&X-Amz-Expires={expires_secs}&X-Amz-SignedHeaders=host");
    if !req.query.is_empty() {
        q = format!("{}&{q}", req.query);
    }
    let host = req.header("host").unwrap_or_default();
    let headers = [("host", host)];
    let view = RequestView { query: &q, headers: &headers, ..*req };
    let canonical = canonical_request(&view, &["host".to_owned()], UNSIGNED_PAYLOAD, true).unwrap_or_default();
    let key = SigningKey::derive(&creds.secret_access_key, date, region, service);
    let signature = hex32(&key.sign(&string_to_sign(&amz_date, date, region, service, &canonical)));
    format!("{q}&X-Amz-Signature={signature}")
}

/// A client's signer: credentials and scope, with the day's signing key
/// cached (deriving it costs four HMACs a request otherwise).
pub struct Signer {
    creds: Credentials,
    region: String,
    service: String,
    /// The signing key and the day (since the epoch) it is for.
    key: std::sync::Mutex<Option<(u64, SigningKey)>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({}, {}/{})", self.creds.access_key_id, self.region, self.service)
    }
}

impl Signer {
    /// Signs as `creds` for `region` and `service`.
    pub fn new(creds: Credentials, region: &str, service: &str) -> Self {
        Self { creds, region: region.to_owned(), service: service.to_owned(), key: std::sync::Mutex::new(None) }
    }

    /// The access key id.
    pub fn access_key_id(&self) -> &str {
        &self.creds.access_key_id
    }

    /// A presigned URL's query for `req`, as [`presign`] makes it.
    pub fn presign(&self, req: &RequestView<'_>, now_secs: u64, expires_secs: u64) -> String {
        presign(req, &self.creds, Scope { region: &self.region, service: &self.service }, now_secs, expires_secs)
    }

    /// Signs `req` as [`sign`] does.
    pub fn sign(&self, req: &RequestView<'_>, payload: &str, now_secs: u64) -> Signature {
        let day = now_secs / 86_400;
        let key = {
            let mut cached = self.key.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match cached.as_ref() {
                Some((d, k)) if *d == day => k.clone(),
                _ => {
                    let k = SigningKey::derive(&self.creds.secret_access_key, &amz_date(now_secs)[..8], &self.region, &self.service);
                    *cached = Some((day, k.clone()));
                    k
                }
            }
        };
        sign_with(req, payload, &self.creds.access_key_id, &key, Scope { region: &self.region, service: &self.service }, now_secs)
    }
}

/// Hex SHA-256 of `body` (a signed payload hash).
pub fn payload_sha256(body: &[u8]) -> String {
    hex32(&Sha256::digest(body).into())
}

/// A running SHA-256 of a body, to compare with [`Payload::Sha256`] at its end.
#[derive(Default, Clone)]
pub struct PayloadHasher(Sha256);

impl PayloadHasher {
    /// Adds bytes.
    pub fn update(&mut self, b: &[u8]) {
        self.0.update(b);
    }
    /// The digest of everything added.
    pub fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
}

/// `YYYYMMDDTHHMMSSZ` for `secs` since the epoch (UTC).
pub fn amz_date(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    // Digits by hand: every signed request formats one.
    let mut b = *b"00000000T000000Z";
    let mut put = |at: usize, width: usize, v: u64| {
        let mut v = v;
        for i in (0..width).rev() {
            b[at + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, y.clamp(0, 9999) as u64);
    put(4, 2, m as u64);
    put(6, 2, d as u64);
    put(9, 2, rem / 3600);
    put(11, 2, rem % 3600 / 60);
    put(13, 2, rem % 60);
    String::from_utf8_lossy(&b).into_owned()
}

/// Seconds since the epoch of a `YYYYMMDDTHHMMSSZ` time; `None` if it is
/// not one (or a field is out of range).
pub fn parse_amz_date(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let part = &s[r];
        if part.bytes().all(|c| c.is_ascii_digit()) { part.parse().ok() } else { None }
    };
    let (y, mo, d, h, mi, se) = (num(0..4)?, num(4..6)?, num(6..8)?, num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 || y < 1970 {
        return None;
    }
    let days = days_from_civil(y as i64, mo as i64, d as i64);
    if civil_from_days(days) != (y as i64, mo as i64, d as i64) {
        return None; // February 30th and the like.
    }
    Some(days as u64 * 86_400 + h * 3600 + mi * 60 + se)
}

/// Howard Hinnant's civil-from-days: (year, month, day) of a day number.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The inverse: the day number of (year, month, day).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sc<'a>(region: &'a str, service: &'a str) -> Scope<'a> {
        Scope { region, service }
    }

    /// AWS's published example (the IAM `ListUsers` GET of the SigV4
    /// documentation): the signing key and signature must come out as
    /// documented.
    #[test]
    fn the_documented_example_signs_and_verifies() {
        let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
        let key = SigningKey::derive(secret, "20150830", "us-east-1", "iam");
        assert_eq!(hex::encode(key.0), "c4afb1cc5771d871763a393e44b703571b55cc28424d1a5e86da6ed3c154a4b9");
        let headers: [(&str, &[u8]); 3] =
            [("Host", b"iam.amazonaws.com"), ("Content-Type", b"application/x-www-form-urlencoded; charset=utf-8"), ("X-Amz-Date", b"20150830T123600Z")];
        let view = RequestView { method: "GET", path: "/", query: "Action=ListUsers&Version=2010-05-08", headers: &headers };
        let signed: Vec<String> = ["content-type", "host", "x-amz-date"].map(String::from).to_vec();
        let canonical = canonical_request(&view, &signed, EMPTY_PAYLOAD_SHA256, false).unwrap();
        assert_eq!(hex::encode(Sha256::digest(canonical.as_bytes())), "f536975d06c0309214f805bb90ccff089219ecd68b2577efef23edd43b7e1a59");
        let sig = hex::encode(key.sign(&string_to_sign("20150830T123600Z", "20150830", "us-east-1", "iam", &canonical)));
        assert_eq!(sig, "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7");
        let auth =
            format!("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature={sig}");
        let mut with_auth = headers.to_vec();
        with_auth.push(("Authorization", auth.as_bytes()));
        let view = RequestView { headers: &with_auth, ..view };
        let c = claim(&view).unwrap().unwrap();
        assert_eq!(c.access_key_id, "AKIDEXAMPLE");
        let now = parse_amz_date("20150830T123600Z").unwrap();
        assert_eq!(verify(&c, &view, &key, sc("us-east-1", "iam"), now), Ok(Payload::Unsigned));
        assert_eq!(verify(&c, &view, &key, sc("us-east-1", "iam"), now + 3600), Err(SigError::Skewed { amz_date: "20150830T123600Z".into() }));
        assert!(matches!(verify(&c, &view, &key, sc("eu-west-1", "iam"), now), Err(SigError::Region { .. })));
        let wrong = SigningKey::derive("another secret", "20150830", "us-east-1", "iam");
        assert_eq!(verify(&c, &view, &wrong, sc("us-east-1", "iam"), now), Err(SigError::Mismatch));
    }

    /// The S3 example of the SigV4 documentation: a GET with a range,
    /// payload hash of the empty body.
    #[test]
    fn the_s3_documented_example_verifies() {
        let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
        let auth = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let headers: [(&str, &[u8]); 5] = [
            ("Host", b"examplebucket.s3.amazonaws.com"),
            ("Range", b"bytes=0-9"),
            ("x-amz-content-sha256", EMPTY_PAYLOAD_SHA256.as_bytes()),
            ("x-amz-date", b"20130524T000000Z"),
            ("Authorization", auth.as_bytes()),
        ];
        let view = RequestView { method: "GET", path: "/test.txt", query: "", headers: &headers };
        let c = claim(&view).unwrap().unwrap();
        let key = SigningKey::derive(secret, &c.date, "us-east-1", "s3");
        assert_eq!(verify(&c, &view, &key, sc("us-east-1", "s3"), parse_amz_date("20130524T000500Z").unwrap()), Ok(Payload::Unsigned));
        // A changed signed header breaks it.
        let mut tampered = headers;
        tampered[1] = ("Range", b"bytes=0-99");
        let view = RequestView { headers: &tampered, ..view };
        assert_eq!(verify(&c, &view, &key, sc("us-east-1", "s3"), parse_amz_date("20130524T000500Z").unwrap()), Err(SigError::Mismatch));
    }

    /// The S3 presigned-URL example of the documentation.
    #[test]
    fn the_documented_presigned_url_verifies_until_it_expires() {
        let creds = Credentials { access_key_id: "AKIAIOSFODNN7EXAMPLE".into(), secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into() };
        let t = parse_amz_date("20130524T000000Z").unwrap();
        let host: [(&str, &[u8]); 1] = [("host", b"examplebucket.s3.amazonaws.com")];
        let req = RequestView { method: "GET", path: "/test.txt", query: "", headers: &host };
        let q = presign(&req, &creds, sc("us-east-1", "s3"), t, 86_400);
        assert!(q.ends_with("X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"), "{q}");
        let headers: [(&str, &[u8]); 1] = [("host", b"examplebucket.s3.amazonaws.com")];
        let view = RequestView { method: "GET", path: "/test.txt", query: &q, headers: &headers };
        let c = claim(&view).unwrap().unwrap();
        let key = SigningKey::derive(&creds.secret_access_key, &c.date, "us-east-1", "s3");
        assert_eq!(verify(&c, &view, &key, sc("us-east-1", "s3"), t + 100), Ok(Payload::Unsigned));
        assert_eq!(verify(&c, &view, &key, sc("us-east-1", "s3"), t + 86_401), Err(SigError::Expired { ago_secs: 1 }));
        let long = presign(&RequestView { path: "/x", ..req }, &creds, sc("us-east-1", "s3"), t, 604_801);
        let view = RequestView { method: "GET", path: "/x", query: &long, headers: &headers };
        assert!(matches!(claim(&view), Err(SigError::ExpiresOutOfRange(_))));
    }

    #[test]
    fn what_the_signer_signs_the_verifier_accepts_and_a_body_hash_is_handed_back() {
        let creds = Credentials { access_key_id: "SKTEST".into(), secret_access_key: "s3cret".into() };
        let now = 1_795_324_022;
        let body_hash = payload_sha256(b"hello");
        let headers: [(&str, &[u8]); 3] = [("host", b"127.0.0.1:8080"), ("x-strata-ttl", b"60"), ("content-length", b"5")];
        let s = sign(&RequestView { method: "POST", path: "/", query: "", headers: &headers }, &body_hash, &creds, sc("us-east-1", "s3"), now);
        let mut sent = headers.to_vec();
        sent.extend([
            ("authorization", s.authorization.as_bytes()),
            ("x-amz-date", s.amz_date.as_bytes()),
            ("x-amz-content-sha256", s.content_sha256.as_bytes()),
        ]);
        let view = RequestView { method: "POST", path: "/", query: "", headers: &sent };
        let c = claim(&view).unwrap().unwrap();
        let key = SigningKey::derive("s3cret", &c.date, "us-east-1", "s3");
        let want: [u8; 32] = Sha256::digest(b"hello").into();
        assert_eq!(verify(&c, &view, &key, sc("us-east-1", "s3"), now), Ok(Payload::Sha256(want)));
        // The same request with another TTL was not what was signed.
        sent[1] = ("x-strata-ttl", b"61");
        let view = RequestView { method: "POST", path: "/", query: "", headers: &sent };
        assert_eq!(verify(&c, &view, &key, sc("us-east-1", "s3"), now), Err(SigError::Mismatch));
    }

    #[test]
    fn a_body_without_a_payload_hash_and_an_unsigned_host_are_refused() {
        let creds = Credentials { access_key_id: "K".into(), secret_access_key: "s".into() };
        let s = sign(&RequestView { method: "POST", path: "/", query: "", headers: &[("host", b"h")] }, UNSIGNED_PAYLOAD, &creds, sc("r", "s3"), 1_000_000);
        let headers: [(&str, &[u8]); 4] =
            [("host", b"h"), ("authorization", s.authorization.as_bytes()), ("x-amz-date", s.amz_date.as_bytes()), ("content-length", b"10")];
        let view = RequestView { method: "POST", path: "/", query: "", headers: &headers };
        let c = claim(&view).unwrap().unwrap();
        let key = SigningKey::derive("s", &c.date, "r", "s3");
        assert_eq!(verify(&c, &view, &key, sc("r", "s3"), 1_000_000), Err(SigError::PayloadHashRequired));
        let no_host = Claim { signed_headers: vec!["x-amz-date".into()], ..c };
        assert_eq!(verify(&no_host, &view, &key, sc("r", "s3"), 1_000_000), Err(SigError::UnsignedHeader("host")));
    }

    #[test]
    fn paths_and_queries_are_canonical_whatever_their_encoding() {
        let creds = Credentials { access_key_id: "K".into(), secret_access_key: "s".into() };
        // Signed over the encoded path; sent with lower-case escapes and
        // the query in another order: still the same canonical request.
        let req = RequestView { method: "GET", path: "/kv/my%20store/a%2Bb", query: "b=2&a=1", headers: &[("host", b"h")] };
        let s = sign(&req, UNSIGNED_PAYLOAD, &creds, sc("r", "s3"), 5_000_000);
        let headers: [(&str, &[u8]); 4] = [
            ("host", b"h"),
            ("authorization", s.authorization.as_bytes()),
            ("x-amz-date", s.amz_date.as_bytes()),
            ("x-amz-content-sha256", UNSIGNED_PAYLOAD.as_bytes()),
        ];
        let view = RequestView { method: "GET", path: "/kv/my%20store/a%2bb", query: "a=1&b=2", headers: &headers };
        let c = claim(&view).unwrap().unwrap();
        let key = SigningKey::derive("s", &c.date, "r", "s3");
        assert_eq!(verify(&c, &view, &key, sc("r", "s3"), 5_000_000), Ok(Payload::Unsigned));
    }

    #[test]
    fn dates_round_trip_and_bad_ones_are_refused() {
        for secs in [0u64, 951_782_400, 1_795_324_022, 4_102_444_799] {
            assert_eq!(parse_amz_date(&amz_date(secs)), Some(secs), "{secs}");
        }
        assert_eq!(amz_date(1_795_324_022), "20261122T050702Z");
        for bad in ["20260230T000000Z", "2026-11-25T000000Z", "20261125T240000Z", "20261125T000000", "", "19691231T235959Z"] {
            assert_eq!(parse_amz_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn malformed_headers_name_the_problem() {
        for auth in [
            "AWS4-HMAC-SHA256",
            "AWS4-HMAC-SHA256 Credential=K/2026/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 Credential=K/20261125/us-east-1/s3/other, SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 SignedHeaders=host, Signature=00",
            "AWS4-HMAC-SHA256 Credential=K/20261125/us-east-1/s3/aws4_request, SignedHeaders=host;;x, Signature=00",
        ] {
            let headers: [(&str, &[u8]); 2] = [("authorization", auth.as_bytes()), ("x-amz-date", b"20261125T000000Z")];
            let view = RequestView { method: "GET", path: "/", query: "", headers: &headers };
            assert!(matches!(claim(&view), Err(SigError::Malformed { .. })), "{auth}");
        }
        let headers: [(&str, &[u8]); 1] = [("authorization", b"AWS4-HMAC-SHA1 Credential=x")];
        let view = RequestView { method: "GET", path: "/", query: "", headers: &headers };
        assert!(matches!(claim(&view), Err(SigError::Algorithm(_))));
        let view = RequestView { method: "GET", path: "/", query: "a=b", headers: &[] };
        assert_eq!(claim(&view), Ok(None));
    }
}

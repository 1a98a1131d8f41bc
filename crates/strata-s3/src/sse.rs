//! Server-side encryption (SSE-S3, SSE-KMS, SSE-C), on `strata-sse`'s key
//! hierarchy and sealed streams.
//!
//! Every encrypted object has its own random data key; its bytes are
//! stored as a sealed stream (a multipart object: one stream per part,
//! each with its own stream id, all under the upload's data key). The data
//! key is kept in the object's metadata sealed under:
//! - SSE-S3 (`x-amz-server-side-encryption: AES256`): the key store's
//!   [`SSE_S3_KEY`], created on first use;
//! - SSE-KMS (`aws:kms`): the key store key the request names (refused if
//!   unknown or disabled), or [`SSE_S3_KEY`] when it names none;
//! - SSE-C: the customer's key, which is never stored: only its MD5, which
//!   S3 returns and a read is checked against, and the sealed data key,
//!   which opens only with that key.
//!
//! The plaintext's MD5 is the ETag of an SSE-S3 object, as S3 gives it; an
//! SSE-C or SSE-KMS object's ETag is a tag of it under the data key (S3's
//! is not the MD5 either, which would say something about the plaintext).
//! Metadata entries (internal, `/`-prefixed): [`SSE_META`], [`KEY_ID_META`],
//! [`DATA_KEY_META`], [`CUSTOMER_MD5_META`] (docs/formats.md).

use crate::StrataS3;
use crate::convert::name_err;
use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use s3s::dto::ServerSideEncryption;
use s3s::{S3Error, S3ErrorCode, S3Result, s3_error};
use std::sync::Arc;
use strata_names::{KmsKey, NameError, NameOp, ObjectMeta};
use strata_router::{BlobData, ByteRange, Router, RouterError};
use strata_sse::Key;
use strata_types::BlobId;

/// How an object is encrypted: `AES256`, `aws:kms` or `SSE-C`.
pub(crate) const SSE_META: &str = "/sse";
/// The key store key its data key is sealed under (SSE-S3, SSE-KMS).
pub(crate) const KEY_ID_META: &str = "/sse-kms-key-id";
/// Its data key, sealed, base64.
pub(crate) const DATA_KEY_META: &str = "/sse-data-key";
/// The base64 MD5 of the customer's key (SSE-C).
pub(crate) const CUSTOMER_MD5_META: &str = "/sse-c-key-md5";
/// The key store key SSE-S3 uses.
pub const SSE_S3_KEY: &str = "strata-sse-s3";
const DATA_KEY_CONTEXT: &[u8] = b"strata object data key";
const CUSTOMER: &str = "SSE-C";

/// A customer's key given with a request (SSE-C), checked.
#[derive(Clone)]
pub(crate) struct CustomerKey {
    key: Key,
    md5: String,
}

/// The three SSE-C headers of a request (or of its copy source).
pub(crate) fn customer_key(algorithm: Option<&str>, key: Option<&str>, md5: Option<&str>) -> S3Result<Option<CustomerKey>> {
    if algorithm.is_none() && key.is_none() && md5.is_none() {
        return Ok(None);
    }
    match algorithm {
        Some("AES256") => {}
        Some(a) => {
            return Err(custom_err("InvalidEncryptionAlgorithmError", format!("the customer-key algorithm must be AES256, not {a:?}")));
        }
        None => return Err(s3_error!(InvalidArgument, "requests with a customer key must give x-amz-server-side-encryption-customer-algorithm: AES256")),
    }
    let key = key.ok_or_else(|| s3_error!(InvalidArgument, "x-amz-server-side-encryption-customer-key is missing"))?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .map_err(|_| s3_error!(InvalidArgument, "x-amz-server-side-encryption-customer-key is not base64"))?;
    let key = Key::from_slice(&raw).map_err(|_| s3_error!(InvalidArgument, "the customer key must be 256 bits (32 bytes), not {} bytes", raw.len()))?;
    let computed = {
        use md5::Digest;
        base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(key.bytes()))
    };
    match md5 {
        Some(m) if m.trim() == computed => Ok(Some(CustomerKey { key, md5: computed })),
        Some(_) => Err(s3_error!(InvalidArgument, "the calculated MD5 hash of the key did not match the hash that was provided")),
        None => Err(s3_error!(InvalidArgument, "x-amz-server-side-encryption-customer-key-MD5 is missing")),
    }
}

/// What a write asks for, by header.
pub(crate) struct Asked<'a> {
    /// `x-amz-server-side-encryption`.
    pub sse: Option<&'a str>,
    /// `x-amz-server-side-encryption-aws-kms-key-id`.
    pub kms_key: Option<&'a str>,
    /// The SSE-C key.
    pub customer: Option<CustomerKey>,
}

impl Asked<'_> {
    /// Whether the request asks for any encryption.
    pub fn any(&self) -> bool {
        self.sse.is_some() || self.kms_key.is_some() || self.customer.is_some()
    }
}

/// The [`Asked`] of an input with S3's full set of encryption headers
/// (PutObject, CopyObject, CreateMultipartUpload).
macro_rules! encryption_asked {
    ($i:expr) => {
        crate::sse::Asked {
            sse: $i.server_side_encryption.as_ref().map(|s| s.as_str()),
            kms_key: $i.ssekms_key_id.as_deref(),
            customer: crate::sse::customer_key($i.sse_customer_algorithm.as_deref(), $i.sse_customer_key.as_deref(), $i.sse_customer_key_md5.as_deref())?,
        }
    };
}
pub(crate) use encryption_asked;

/// The SSE-C key of a read or part request.
macro_rules! customer_of {
    ($i:expr) => {
        crate::sse::customer_key($i.sse_customer_algorithm.as_deref(), $i.sse_customer_key.as_deref(), $i.sse_customer_key_md5.as_deref())?
    };
}
pub(crate) use customer_of;

/// The SSE-C key a copy gives for its source.
macro_rules! copy_source_customer_of {
    ($i:expr) => {
        crate::sse::customer_key(
            $i.copy_source_sse_customer_algorithm.as_deref(),
            $i.copy_source_sse_customer_key.as_deref(),
            $i.copy_source_sse_customer_key_md5.as_deref(),
        )?
    };
}
pub(crate) use copy_source_customer_of;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    S3,
    Kms(String),
    Customer(String),
}

/// An object's encryption, opened: its data key and how it is sealed.
#[derive(Clone)]
pub(crate) struct Seal {
    pub dek: Key,
    kind: Kind,
}

/// The encryption headers of an answer.
#[derive(Default, Clone)]
pub(crate) struct Reply {
    pub sse: Option<ServerSideEncryption>,
    pub kms_key_id: Option<String>,
    pub customer_algorithm: Option<String>,
    pub customer_md5: Option<String>,
}

/// Sets an output's encryption fields from a [`Reply`].
macro_rules! set_reply {
    ($out:expr, $r:expr) => {{
        let r: crate::sse::Reply = $r;
        $out.server_side_encryption = r.sse;
        $out.ssekms_key_id = r.kms_key_id;
        $out.sse_customer_algorithm = r.customer_algorithm;
        $out.sse_customer_key_md5 = r.customer_md5;
    }};
}
pub(crate) use set_reply;

impl Seal {
    /// Whether the ETag is a tag under the data key rather than the MD5.
    pub fn opaque_etag(&self) -> bool {
        !matches!(self.kind, Kind::S3)
    }

    /// The ETag bytes of a body whose MD5 is `md5`.
    pub fn etag_of(&self, md5: [u8; 16]) -> [u8; 16] {
        if self.opaque_etag() { self.dek.tag_of(&md5) } else { md5 }
    }

    pub fn reply(&self) -> Reply {
        match &self.kind {
            Kind::S3 => Reply { sse: Some(ServerSideEncryption::from_static(ServerSideEncryption::AES256)), ..Reply::default() },
            Kind::Kms(id) => {
                Reply { sse: Some(ServerSideEncryption::from_static(ServerSideEncryption::AWS_KMS)), kms_key_id: Some(id.clone()), ..Reply::default() }
            }
            Kind::Customer(md5) => Reply { customer_algorithm: Some("AES256".into()), customer_md5: Some(md5.clone()), ..Reply::default() },
        }
    }
}

/// Drops the encryption entries (a copy's metadata gets its own).
pub(crate) fn strip(meta: &mut Vec<(String, String)>) {
    meta.retain(|(k, _)| ![SSE_META, KEY_ID_META, DATA_KEY_META, CUSTOMER_MD5_META].contains(&k.as_str()));
}

/// Checks the customer key a request gave against an object without
/// opening it (GetObjectAttributes): required, and the right one, for an
/// SSE-C object; refused for any other.
pub(crate) fn check_customer(meta: &[(String, String)], customer: Option<&CustomerKey>) -> S3Result<()> {
    let get = |name: &str| meta.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    match (get(SSE_META) == Some(CUSTOMER), customer) {
        (true, None) => Err(s3_error!(
            InvalidRequest,
            "the object was stored using a form of server-side encryption: the correct parameters (its customer key) must be provided to retrieve it"
        )),
        (true, Some(c)) if get(CUSTOMER_MD5_META) != Some(c.md5.as_str()) => {
            Err(s3_error!(AccessDenied, "the customer key given is not the one the object was encrypted with"))
        }
        (false, Some(_)) => {
            Err(s3_error!(InvalidRequest, "the encryption parameters are not applicable to this object: it is not encrypted with a customer key"))
        }
        _ => Ok(()),
    }
}

/// An error of S3's own code outside s3s's list, answered 400.
fn custom_err(code: &str, msg: String) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::Custom(code.to_owned().into()), msg);
    e.set_status_code(http::StatusCode::BAD_REQUEST);
    e
}

impl StrataS3 {
    fn root_key(&self) -> S3Result<&Key> {
        self.opts.kms_root.as_ref().ok_or_else(|| s3_error!(NotImplemented, "this server has no key store root key: SSE-S3 and SSE-KMS are off"))
    }

    /// Key store key `id`, opened with the root key; the SSE-S3 key is
    /// created on first use.
    async fn kms_key(&self, id: &str) -> S3Result<Key> {
        let root = self.root_key()?;
        let mut found = strata_names::read(&*self.names, |s| s.kms.get(id).cloned());
        if found.is_none() && id == SSE_S3_KEY {
            let key = KmsKey::generate(root, id, "SSE-S3 objects", self.now_ms());
            match self.names.apply(NameOp::CreateKmsKey { key }).await {
                Ok(_) | Err(NameError::KmsKeyExists(_)) => {}
                Err(e) => return Err(name_err(e)),
            }
            found = strata_names::read(&*self.names, |s| s.kms.get(id).cloned());
        }
        let k =
            found.ok_or_else(|| custom_err("KMS.NotFoundException", format!("no key {id:?} in the key store (create it with `strata kms create {id}`)")))?;
        if !k.enabled {
            return Err(custom_err("KMS.DisabledException", format!("key {id:?} is disabled")));
        }
        k.open(root).map_err(|e| s3_error!(InternalError, "key store key {id:?} does not open with this node's root key ({e}): the nodes' root keys differ"))
    }

    /// The encryption a write asks for: a new data key and the metadata
    /// entries that keep it sealed (None for a write without encryption).
    pub(crate) async fn seal_for_write(&self, bucket: &str, asked: Asked<'_>) -> S3Result<Option<(Seal, Vec<(String, String)>)>> {
        // A request that asks for no encryption gets the bucket's default.
        let default = if asked.any() { None } else { self.default_encryption(bucket) };
        let asked = match &default {
            Some(d) => Asked { sse: Some(d.algorithm.as_str()), kms_key: d.kms_key_id.as_deref(), customer: None },
            None => asked,
        };
        let kind = match (asked.sse, asked.customer) {
            (Some(_), Some(_)) => return Err(s3_error!(InvalidArgument, "server-side encryption and a customer key cannot both be given")),
            (None, Some(c)) => {
                if asked.kms_key.is_some() {
                    return Err(s3_error!(InvalidArgument, "a KMS key id is given without x-amz-server-side-encryption: aws:kms"));
                }
                let dek = Key::random();
                let sealed = strata_sse::seal_key(&c.key, DATA_KEY_CONTEXT, &dek);
                let meta =
                    vec![(SSE_META.to_owned(), CUSTOMER.to_owned()), (CUSTOMER_MD5_META.to_owned(), c.md5.clone()), (DATA_KEY_META.to_owned(), b64(&sealed))];
                return Ok(Some((Seal { dek, kind: Kind::Customer(c.md5) }, meta)));
            }
            (None, None) if asked.kms_key.is_some() => {
                return Err(s3_error!(InvalidArgument, "a KMS key id is given without x-amz-server-side-encryption: aws:kms"));
            }
            (None, None) => return Ok(None),
            (Some("AES256"), None) if asked.kms_key.is_some() => return Err(s3_error!(InvalidArgument, "a KMS key id is only valid with aws:kms")),
            (Some("AES256"), None) => Kind::S3,
            (Some("aws:kms"), None) => Kind::Kms(asked.kms_key.map(kms_id).unwrap_or(SSE_S3_KEY).to_owned()),
            (Some(other), None) => return Err(s3_error!(InvalidArgument, "the server-side encryption {other:?} is not supported (AES256, aws:kms)")),
        };
        let (id, name) = match &kind {
            Kind::S3 => (SSE_S3_KEY.to_owned(), "AES256"),
            Kind::Kms(id) => (id.clone(), "aws:kms"),
            Kind::Customer(_) => unreachable!("handled above"),
        };
        let kek = self.kms_key(&id).await?;
        let dek = Key::random();
        let sealed = strata_sse::seal_key(&kek, DATA_KEY_CONTEXT, &dek);
        let meta = vec![(SSE_META.to_owned(), name.to_owned()), (KEY_ID_META.to_owned(), id), (DATA_KEY_META.to_owned(), b64(&sealed))];
        Ok(Some((Seal { dek, kind }, meta)))
    }

    /// Opens an object's (or an upload's) encryption from its metadata with
    /// the customer key the request gave, refusing a request whose key is
    /// missing, not needed or wrong as S3 does.
    pub(crate) async fn open_seal(&self, meta: &[(String, String)], customer: Option<CustomerKey>) -> S3Result<Option<Seal>> {
        check_customer(meta, customer.as_ref())?;
        let get = |name: &str| meta.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        let Some(sse) = get(SSE_META) else { return Ok(None) };
        let sealed = get(DATA_KEY_META)
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
            .ok_or_else(|| s3_error!(InternalError, "the object's sealed data key is missing or malformed"))?;
        // check_customer let a key through only for an SSE-C object.
        if let Some(c) = customer {
            let dek = strata_sse::unseal_key(&c.key, DATA_KEY_CONTEXT, &sealed)
                .map_err(|_| s3_error!(AccessDenied, "the customer key given does not open the object"))?;
            return Ok(Some(Seal { dek, kind: Kind::Customer(c.md5) }));
        }
        let id = get(KEY_ID_META).ok_or_else(|| s3_error!(InternalError, "the object's key store key id is missing"))?;
        let kek = self.kms_key(id).await?;
        let dek = strata_sse::unseal_key(&kek, DATA_KEY_CONTEXT, &sealed).map_err(|e| s3_error!(InternalError, "the object's data key does not open: {e}"))?;
        let kind = if sse == "aws:kms" { Kind::Kms(id.to_owned()) } else { Kind::S3 };
        Ok(Some(Seal { dek, kind }))
    }
}

/// One part's share of a read of a sealed object.
struct PartRead {
    /// Where the part's sealed stream starts in the blob.
    sealed_at: u64,
    /// The part's plaintext bytes.
    plain: u64,
    /// The plaintext wanted of it, `[start, end)`, relative to the part.
    start: u64,
    end: u64,
}

/// The parts of `o` that plaintext `[start, end)` touches.
fn part_reads(o: &ObjectMeta, start: u64, end: u64) -> S3Result<Vec<PartRead>> {
    let sizes = crate::ops::part_sizes(o)?.unwrap_or_else(|| vec![o.size]);
    let (mut plain_at, mut sealed_at) = (0u64, 0u64);
    let mut out = Vec::new();
    for size in sizes {
        let (ps, pe) = (plain_at, plain_at + size);
        if pe > start && ps < end {
            out.push(PartRead { sealed_at, plain: size, start: start.max(ps) - ps, end: end.min(pe) - ps });
        }
        plain_at = pe;
        sealed_at += strata_sse::sealed_len(size);
    }
    Ok(out)
}

fn corrupt(what: &str, e: strata_sse::SseError) -> RouterError {
    RouterError::Corrupt(format!("{what}: {e}"))
}

async fn read_all(data: BlobData) -> Result<Bytes, RouterError> {
    match data {
        BlobData::Whole(b, _) => Ok(b),
        BlobData::Stream(mut s) => {
            let mut buf = bytes::BytesMut::new();
            while let Some(b) = s.next().await {
                buf.extend_from_slice(&b?);
            }
            Ok(buf.freeze())
        }
    }
}

fn data_stream(data: BlobData) -> BoxStream<'static, Result<Bytes, RouterError>> {
    match data {
        BlobData::Whole(b, _) => futures_util::stream::once(async move { Ok(b) }).boxed(),
        BlobData::Stream(s) => s,
    }
}

/// A part being decrypted.
struct Opening {
    opener: strata_sse::StreamOpener,
    sealed: BoxStream<'static, Result<Bytes, RouterError>>,
    /// Plaintext to drop at the front (the wanted range starts inside a segment).
    skip: usize,
    /// Plaintext still wanted of this part.
    left: u64,
}

/// The state of a decrypting read.
struct Reading {
    router: Arc<Router>,
    blob: BlobId,
    dek: Key,
    parts: std::collections::VecDeque<PartRead>,
    first_header: Option<Bytes>,
    current: Option<Opening>,
    done: bool,
}

impl Reading {
    async fn open(&mut self, p: PartRead) -> Result<Opening, RouterError> {
        let header = match self.first_header.take() {
            Some(h) => h,
            None => read_header(&self.router, self.blob, p.sealed_at).await?,
        };
        let (first, from, to) = strata_sse::sealed_range(p.plain, p.start, p.end);
        let opener = strata_sse::StreamOpener::new(&self.dek, &header, p.plain, first).map_err(|e| corrupt("a sealed stream's header", e))?;
        let body = self.router.get(self.blob, Some(ByteRange::FromTo(p.sealed_at + from, p.sealed_at + to - 1))).await?;
        let skip = (p.start - first * strata_sse::SEGMENT_BYTES as u64) as usize;
        Ok(Opening { opener, sealed: data_stream(body.data), skip, left: p.end - p.start })
    }

    /// The next piece of plaintext (None at the end).
    async fn next(&mut self) -> Option<Result<Bytes, RouterError>> {
        while !self.done {
            let Some(cur) = self.current.as_mut() else {
                match self.parts.pop_front() {
                    None => self.done = true,
                    Some(p) => match self.open(p).await {
                        Ok(o) => self.current = Some(o),
                        Err(e) => return self.fail(e),
                    },
                }
                continue;
            };
            let mut plain = Vec::new();
            let ended = match cur.sealed.next().await {
                Some(Ok(b)) => match cur.opener.push(&b, &mut plain) {
                    Ok(()) => false,
                    Err(e) => return self.fail(corrupt("a sealed segment", e)),
                },
                Some(Err(e)) => return self.fail(e),
                None => match cur.opener.finish(&mut plain) {
                    Ok(()) => true,
                    Err(e) => return self.fail(corrupt("a sealed segment", e)),
                },
            };
            let out = cur.trim(plain);
            if ended {
                let short = cur.left;
                if short != 0 {
                    return self.fail(RouterError::Corrupt(format!("a sealed part ended {short} bytes short")));
                }
                self.current = None;
            }
            if !out.is_empty() {
                return Some(Ok(out));
            }
        }
        None
    }

    fn fail(&mut self, e: RouterError) -> Option<Result<Bytes, RouterError>> {
        self.done = true;
        Some(Err(e))
    }
}

impl Opening {
    /// The wanted share of freshly opened plaintext.
    fn trim(&mut self, plain: Vec<u8>) -> Bytes {
        let skip = self.skip.min(plain.len());
        self.skip -= skip;
        let take = ((plain.len() - skip) as u64).min(self.left) as usize;
        self.left -= take as u64;
        Bytes::from(plain).slice(skip..skip + take)
    }
}

async fn read_header(router: &Arc<Router>, blob: BlobId, at: u64) -> Result<Bytes, RouterError> {
    let h = read_all(router.get(blob, Some(ByteRange::FromTo(at, at + strata_sse::HEADER_BYTES as u64 - 1))).await?.data).await?;
    if h.len() != strata_sse::HEADER_BYTES {
        return Err(RouterError::Corrupt(format!("a sealed stream's header is {} bytes", h.len())));
    }
    Ok(h)
}

impl StrataS3 {
    /// Opens plaintext `range` of the sealed object `o`: the first part's
    /// header is read now (so a blob freed by an overwrite racing with
    /// this read is reported here, in the inner result, where the caller
    /// retries), the rest as the body is consumed. The body's range is the
    /// plaintext's.
    pub(crate) async fn open_sealed(&self, o: &ObjectMeta, seal: &Seal, range: Option<ByteRange>) -> S3Result<Result<strata_router::BlobBody, RouterError>> {
        let (start, end) = match range {
            None => (0, o.size),
            Some(r) => r.resolve(o.size).ok_or_else(|| s3_error!(InvalidRange, "the range is outside the object's {} bytes", o.size))?,
        };
        let parts: std::collections::VecDeque<PartRead> = part_reads(o, start, end)?.into();
        let at = parts.front().map_or(0, |p| p.sealed_at);
        let head = match self.router.get(o.blob, Some(ByteRange::FromTo(at, at + strata_sse::HEADER_BYTES as u64 - 1))).await {
            Ok(h) => h,
            Err(e) => return Ok(Err(e)),
        };
        let info = head.info;
        let header = match read_all(head.data).await {
            Ok(h) if h.len() == strata_sse::HEADER_BYTES => h,
            Ok(h) => return Ok(Err(RouterError::Corrupt(format!("a sealed stream's header is {} bytes", h.len())))),
            Err(e) => return Ok(Err(e)),
        };
        let first_header = (!parts.is_empty()).then_some(header);
        let reading = Reading { router: self.router.clone(), blob: o.blob, dek: seal.dek.clone(), parts, first_header, current: None, done: false };
        let stream = futures_util::stream::unfold(reading, |mut r| async move { r.next().await.map(|item| (item, r)) }).boxed();
        Ok(Ok(strata_router::BlobBody { info, range: (start, end), data: BlobData::Stream(stream) }))
    }
}

/// A key id as SSE-KMS requests give it: the id, or an ARN ending in
/// `key/<id>` (or `alias/<id>`).
/// The document kind a bucket's default encryption is kept under.
pub(crate) const DEFAULT_DOC: &str = "encryption";

/// A bucket's default encryption (PutBucketEncryption), as stored: what a
/// write that asks for none gets.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct BucketDefault {
    /// `AES256` or `aws:kms`.
    pub algorithm: String,
    /// The key store key, for `aws:kms` (none: Strata's SSE-S3 key).
    pub kms_key_id: Option<String>,
    /// S3 Bucket Keys, stored and echoed (every object has its own data key anyway).
    pub bucket_key: bool,
}

impl BucketDefault {
    /// Checks a PutBucketEncryption rule: AES256, or aws:kms naming a key
    /// the key store has (`key_exists`).
    pub(crate) fn from_rule(algorithm: &str, kms_key: Option<&str>, bucket_key: bool, key_exists: impl Fn(&str) -> bool) -> S3Result<Self> {
        match (algorithm, kms_key) {
            ("AES256", Some(_)) => Err(s3_error!(InvalidArgument, "a KMS master key id is only valid with aws:kms")),
            ("AES256", None) => Ok(Self { algorithm: algorithm.into(), kms_key_id: None, bucket_key }),
            ("aws:kms", key) => {
                let id = key.map(kms_id);
                if let Some(id) = id
                    && !key_exists(id)
                {
                    return Err(custom_err("KMS.NotFoundException", format!("the key store has no key {id:?}")));
                }
                Ok(Self { algorithm: algorithm.into(), kms_key_id: id.map(str::to_owned), bucket_key })
            }
            (other, _) => Err(s3_error!(InvalidArgument, "default encryption {other:?} is not supported (AES256, aws:kms)")),
        }
    }
}

impl crate::StrataS3 {
    /// `bucket`'s default encryption, if it has one.
    pub(crate) fn default_encryption(&self, bucket: &str) -> Option<BucketDefault> {
        strata_names::read(&*self.names, |s| s.bucket_doc(bucket, DEFAULT_DOC).and_then(|d| serde_json::from_str(d).ok()))
    }
}

fn kms_id(given: &str) -> &str {
    given.rsplit_once("key/").or_else(|| given.rsplit_once("alias/")).map_or(given, |(_, id)| id)
}

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md5_b64(k: &[u8]) -> String {
        use md5::Digest;
        base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(k))
    }

    #[test]
    fn customer_keys_are_checked_as_s3_checks_them() {
        let raw = [7u8; 32];
        let k = b64(&raw);
        let m = md5_b64(&raw);
        assert!(customer_key(None, None, None).unwrap().is_none());
        assert_eq!(customer_key(Some("AES256"), Some(&k), Some(&m)).unwrap().unwrap().md5, m);
        let code = |r: S3Result<Option<CustomerKey>>| r.err().map(|e| e.code().as_str().to_owned());
        assert_eq!(code(customer_key(Some("AES128"), Some(&k), Some(&m))).as_deref(), Some("InvalidEncryptionAlgorithmError"));
        assert_eq!(code(customer_key(Some("AES256"), Some(&b64(&[7u8; 16])), Some(&md5_b64(&[7u8; 16])))).as_deref(), Some("InvalidArgument"));
        assert_eq!(code(customer_key(Some("AES256"), Some(&k), Some(&md5_b64(b"other")))).as_deref(), Some("InvalidArgument"));
        assert_eq!(code(customer_key(Some("AES256"), Some(&k), None)).as_deref(), Some("InvalidArgument"));
        assert_eq!(code(customer_key(None, Some(&k), Some(&m))).as_deref(), Some("InvalidArgument"));
        assert_eq!(code(customer_key(Some("AES256"), Some("%%"), Some(&m))).as_deref(), Some("InvalidArgument"));
    }

    #[test]
    fn kms_ids_are_taken_from_arns() {
        assert_eq!(kms_id("app"), "app");
        assert_eq!(kms_id("arn:aws:kms:us-east-1:123:key/app"), "app");
        assert_eq!(kms_id("alias/app"), "app");
    }
}

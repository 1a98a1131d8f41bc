//! Encryption at rest for S3's server-side encryption: the key hierarchy
//! and the format encrypted objects are stored in.
//!
//! Keys: a node's **root key** ([`root`], a file of its own, never in the
//! names) seals the **KMS keys** kept in the replicated names; each object
//! gets a random **data key**, sealed ([`seal`]) under a KMS key (SSE-S3,
//! SSE-KMS) or under the customer's own key (SSE-C, which is never
//! stored), and the sealed data key is kept in the object's metadata. A
//! wrong key fails to unseal (AES-256-GCM's tag), which is how a GET with
//! the wrong SSE-C key is told apart from the right one.
//!
//! Bytes: an object's plaintext is stored as a **sealed stream**
//! ([`StreamSealer`], [`StreamOpener`]): a 16-byte header (magic, version,
//! segment size, a random 8-byte stream id) and then 64 KiB segments, each
//! encrypted with AES-256-GCM under the data key with the nonce `stream id
//! ‖ segment index` (the top bit of the index marks the last segment, so a
//! cut stream fails instead of reading short) and the header as associated
//! data. Segments let a ranged GET decrypt only the segments it needs
//! ([`sealed_range`]). Layout in docs/formats.md, "Sealed stream".
//!
//! Owns: AES-256-GCM sealing, key derivation, the sealed-stream format and
//! the root key file. Must not depend on: an async runtime or any HTTP
//! crate; the S3 crate feeds it bytes and keeps the keys' names.
//!
//! Layer rule (checked by the test command): may use no Strata crate;
//! never an async runtime or an HTTP crate.

pub mod root;

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use rand::RngCore;

/// Bytes of every key (AES-256).
pub const KEY_BYTES: usize = 32;
/// Plaintext bytes per segment of a sealed stream.
pub const SEGMENT_BYTES: usize = 64 << 10;
/// Bytes of a GCM tag.
pub const TAG_BYTES: usize = 16;
/// Bytes of a sealed stream's header.
pub const HEADER_BYTES: usize = 16;
const MAGIC: &[u8; 4] = b"SSGS";
const STREAM_VERSION: u16 = 1;
const SEGMENT_LOG2: u8 = 16;
const LAST: u32 = 1 << 31;
const SEALED_VERSION: u8 = 1;
const NONCE_BYTES: usize = 12;

/// What can go wrong opening sealed bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A key of the wrong length.
    #[error("a key must be {KEY_BYTES} bytes, not {0}")]
    KeyLength(usize),
    /// Authentication failed: the wrong key, or damaged bytes.
    #[error("the {0} does not open with this key (wrong key, or damaged)")]
    Unauthentic(&'static str),
    /// Bytes that are not of the format (too short, a wrong magic or version).
    #[error("not a sealed {what}: {detail}")]
    Format {
        /// What was expected.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
}

/// A 256-bit key. Its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_BYTES]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A fresh random key.
    pub fn random() -> Self {
        let mut k = [0; KEY_BYTES];
        rand::rng().fill_bytes(&mut k);
        Self(k)
    }

    /// A key of exactly [`KEY_BYTES`] bytes.
    pub fn from_slice(b: &[u8]) -> Result<Self, SseError> {
        <[u8; KEY_BYTES]>::try_from(b).map(Self).map_err(|_| SseError::KeyLength(b.len()))
    }

    /// A key derived from `secret` for `purpose` (HMAC-SHA256 as the PRF),
    /// so one secret gives independent keys for independent uses.
    pub fn derive(secret: &[u8], purpose: &str) -> Self {
        use hmac::Mac;
        let mut m = <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(secret).expect("HMAC takes any key length");
        m.update(b"strata-sse/1 ");
        m.update(purpose.as_bytes());
        Self(m.finalize().into_bytes().into())
    }

    /// The key's bytes (to seal it under another key).
    pub fn bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }

    fn cipher(&self) -> Aes256Gcm {
        Aes256Gcm::new(&self.0.into())
    }

    /// A 16-byte tag of `data` under this key: an encrypted object's ETag
    /// (S3's ETag of an SSE-C or SSE-KMS object is not the MD5 of its
    /// plaintext, which would say something about the plaintext).
    pub fn tag_of(&self, data: &[u8]) -> [u8; 16] {
        let k = Self::derive(&self.0, "etag");
        use hmac::Mac;
        let mut m = <hmac::Hmac<sha2::Sha256> as hmac::KeyInit>::new_from_slice(&k.0).expect("HMAC takes any key length");
        m.update(data);
        let full: [u8; 32] = m.finalize().into_bytes().into();
        let mut out = [0; 16];
        out.copy_from_slice(&full[..16]);
        out
    }
}

/// Seals a small secret (a key) under `kek`, bound to `context` (which
/// must be given again to open it): `version 1 ‖ random 12-byte nonce ‖
/// ciphertext ‖ tag`.
pub fn seal(kek: &Key, context: &[u8], secret: &[u8]) -> Vec<u8> {
    let mut nonce = [0u8; NONCE_BYTES];
    rand::rng().fill_bytes(&mut nonce);
    let mut buf = secret.to_vec();
    let tag = kek.cipher().encrypt_inout_detached(&Nonce::from(nonce), context, buf.as_mut_slice().into()).expect("a short secret always seals");
    let mut out = Vec::with_capacity(1 + NONCE_BYTES + buf.len() + TAG_BYTES);
    out.push(SEALED_VERSION);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&buf);
    out.extend_from_slice(&tag);
    out
}

/// Opens what [`seal`] sealed with the same key and context.
pub fn unseal(kek: &Key, context: &[u8], sealed: &[u8]) -> Result<Vec<u8>, SseError> {
    let bad = |detail: String| SseError::Format { what: "key", detail };
    if sealed.len() < 1 + NONCE_BYTES + TAG_BYTES {
        return Err(bad(format!("{} bytes", sealed.len())));
    }
    if sealed[0] != SEALED_VERSION {
        return Err(bad(format!("version {}", sealed[0])));
    }
    let nonce = <[u8; NONCE_BYTES]>::try_from(&sealed[1..1 + NONCE_BYTES]).map_err(|_| bad("nonce".into()))?;
    let body = &sealed[1 + NONCE_BYTES..];
    let (ct, tag) = body.split_at(body.len() - TAG_BYTES);
    let mut buf = ct.to_vec();
    let tag = Tag::try_from(tag).map_err(|_| bad("tag".into()))?;
    kek.cipher().decrypt_inout_detached(&Nonce::from(nonce), context, buf.as_mut_slice().into(), &tag).map_err(|_| SseError::Unauthentic("sealed key"))?;
    Ok(buf)
}

/// Seals a key under `kek` ([`seal`] of its bytes).
pub fn seal_key(kek: &Key, context: &[u8], key: &Key) -> Vec<u8> {
    seal(kek, context, key.bytes())
}

/// Opens a key sealed by [`seal_key`].
pub fn unseal_key(kek: &Key, context: &[u8], sealed: &[u8]) -> Result<Key, SseError> {
    Key::from_slice(&unseal(kek, context, sealed)?)
}

/// Segments of a stream of `plain` bytes (an empty stream has one, empty).
pub fn segments(plain: u64) -> u64 {
    plain.div_ceil(SEGMENT_BYTES as u64).max(1)
}

/// Stored bytes of a sealed stream of `plain` plaintext bytes.
pub fn sealed_len(plain: u64) -> u64 {
    HEADER_BYTES as u64 + plain + segments(plain) * TAG_BYTES as u64
}

/// Where plaintext bytes `[start, end)` of a stream of `plain` bytes lie in
/// its sealed form: the first segment holding them, and the sealed bytes
/// `[from, to)` of whole segments covering them (header excluded).
/// `start < end <= plain`, or `start == end == 0` for an empty stream.
pub fn sealed_range(plain: u64, start: u64, end: u64) -> (u64, u64, u64) {
    let seg = SEGMENT_BYTES as u64;
    let step = seg + TAG_BYTES as u64;
    let first = start / seg;
    let last = if end == 0 { 0 } else { (end - 1) / seg };
    let from = HEADER_BYTES as u64 + first * step;
    let to = (HEADER_BYTES as u64 + (last + 1) * step).min(sealed_len(plain));
    (first, from, to)
}

fn nonce(id: &[u8; 8], index: u64, last: bool) -> Result<Nonce<aes_gcm::aead::consts::U12>, SseError> {
    let i = u32::try_from(index)
        .ok()
        .filter(|i| *i < LAST)
        .ok_or_else(|| SseError::Format { what: "stream", detail: format!("segment {index} is past the last one a stream may have") })?;
    let mut n = [0u8; NONCE_BYTES];
    n[..8].copy_from_slice(id);
    n[8..].copy_from_slice(&(i | if last { LAST } else { 0 }).to_be_bytes());
    Ok(Nonce::from(n))
}

/// Seals a stream of plaintext pushed in pieces of any size.
pub struct StreamSealer {
    cipher: Aes256Gcm,
    header: [u8; HEADER_BYTES],
    id: [u8; 8],
    index: u64,
    /// Plaintext not yet sealed: at most one segment, held back until more
    /// follows (the last segment is marked as such).
    pending: Vec<u8>,
    header_out: bool,
}

impl StreamSealer {
    /// A stream under `key` with a random stream id.
    pub fn new(key: &Key) -> Self {
        let mut id = [0u8; 8];
        rand::rng().fill_bytes(&mut id);
        let mut header = [0u8; HEADER_BYTES];
        header[..4].copy_from_slice(MAGIC);
        header[4..6].copy_from_slice(&STREAM_VERSION.to_le_bytes());
        header[6] = SEGMENT_LOG2;
        header[8..].copy_from_slice(&id);
        Self { cipher: key.cipher(), header, id, index: 0, pending: Vec::with_capacity(SEGMENT_BYTES), header_out: false }
    }

    fn seal_pending(&mut self, last: bool, out: &mut Vec<u8>) -> Result<(), SseError> {
        let n = nonce(&self.id, self.index, last)?;
        let start = out.len();
        out.extend_from_slice(&self.pending);
        let tag = self
            .cipher
            .encrypt_inout_detached(&n, &self.header, (&mut out[start..]).into())
            .map_err(|_| SseError::Format { what: "stream", detail: "a segment too long".into() })?;
        out.extend_from_slice(&tag);
        self.pending.clear();
        self.index += 1;
        Ok(())
    }

    /// Takes `data`, appending to `out` the sealed bytes that are final
    /// now (the header first, then whole segments once more data follows).
    pub fn push(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> Result<(), SseError> {
        if !self.header_out {
            out.extend_from_slice(&self.header);
            self.header_out = true;
        }
        while !data.is_empty() {
            if self.pending.len() == SEGMENT_BYTES {
                self.seal_pending(false, out)?;
            }
            let take = (SEGMENT_BYTES - self.pending.len()).min(data.len());
            self.pending.extend_from_slice(&data[..take]);
            data = &data[take..];
        }
        Ok(())
    }

    /// Seals what is left as the last segment.
    pub fn finish(mut self, out: &mut Vec<u8>) -> Result<(), SseError> {
        self.push(&[], out)?;
        self.seal_pending(true, out)
    }

    /// Seals all of `plain` at once.
    pub fn seal_all(key: &Key, plain: &[u8]) -> Result<Vec<u8>, SseError> {
        let mut out = Vec::with_capacity(sealed_len(plain.len() as u64) as usize);
        let mut s = Self::new(key);
        s.push(plain, &mut out)?;
        s.finish(&mut out)?;
        Ok(out)
    }
}

/// Opens whole segments of a sealed stream, from a given one on.
pub struct StreamOpener {
    cipher: Aes256Gcm,
    header: [u8; HEADER_BYTES],
    id: [u8; 8],
    index: u64,
    last: u64,
    buf: Vec<u8>,
}

impl StreamOpener {
    /// An opener of the stream with `header` holding `plain` plaintext
    /// bytes, fed sealed bytes from the start of segment `first` on.
    pub fn new(key: &Key, header: &[u8], plain: u64, first: u64) -> Result<Self, SseError> {
        let bad = |detail: String| SseError::Format { what: "stream", detail };
        let header = <[u8; HEADER_BYTES]>::try_from(header).map_err(|_| bad(format!("a header of {} bytes", header.len())))?;
        if &header[..4] != MAGIC {
            return Err(bad("no magic".into()));
        }
        let version = u16::from_le_bytes([header[4], header[5]]);
        if version != STREAM_VERSION || header[6] != SEGMENT_LOG2 {
            return Err(bad(format!("version {version}, segment size 2^{}", header[6])));
        }
        let mut id = [0u8; 8];
        id.copy_from_slice(&header[8..]);
        Ok(Self { cipher: key.cipher(), header, id, index: first, last: segments(plain) - 1, buf: Vec::new() })
    }

    fn open_segment(&mut self, seg: &[u8], out: &mut Vec<u8>) -> Result<(), SseError> {
        if self.index > self.last {
            return Err(SseError::Format { what: "stream", detail: "bytes past the last segment".into() });
        }
        let n = nonce(&self.id, self.index, self.index == self.last)?;
        let (ct, tag) = seg.split_at(seg.len() - TAG_BYTES);
        let tag = Tag::try_from(tag).map_err(|_| SseError::Unauthentic("segment"))?;
        let start = out.len();
        out.extend_from_slice(ct);
        self.cipher.decrypt_inout_detached(&n, &self.header, (&mut out[start..]).into(), &tag).map_err(|_| SseError::Unauthentic("segment"))?;
        self.index += 1;
        Ok(())
    }

    /// Takes sealed bytes, appending the plaintext of every segment they
    /// complete to `out`.
    pub fn push(&mut self, mut data: &[u8], out: &mut Vec<u8>) -> Result<(), SseError> {
        let whole = SEGMENT_BYTES + TAG_BYTES;
        if !self.buf.is_empty() {
            let take = (whole - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.buf.len() == whole {
                let seg = std::mem::take(&mut self.buf);
                self.open_segment(&seg, out)?;
            }
        }
        while data.len() >= whole {
            self.open_segment(&data[..whole], out)?;
            data = &data[whole..];
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    /// Opens the short last segment left over; fails if bytes were left
    /// that are not one.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), SseError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.buf.len() < TAG_BYTES || self.index != self.last {
            return Err(SseError::Unauthentic("segment"));
        }
        let seg = std::mem::take(&mut self.buf);
        self.open_segment(&seg, out)
    }

    /// Opens a whole sealed stream of `plain` bytes.
    pub fn open_all(key: &Key, sealed: &[u8], plain: u64) -> Result<Vec<u8>, SseError> {
        if sealed.len() as u64 != sealed_len(plain) {
            return Err(SseError::Format { what: "stream", detail: format!("{} bytes for {plain} plaintext bytes", sealed.len()) });
        }
        let mut o = Self::new(key, &sealed[..HEADER_BYTES], plain, 0)?;
        let mut out = Vec::with_capacity(plain as usize);
        o.push(&sealed[HEADER_BYTES..], &mut out)?;
        o.finish(&mut out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn plain(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn sealed_keys_open_only_with_their_key_and_context() {
        let kek = Key::random();
        let k = Key::random();
        let s = seal_key(&kek, b"ctx", &k);
        assert_eq!(unseal_key(&kek, b"ctx", &s).unwrap(), k);
        assert_eq!(unseal_key(&Key::random(), b"ctx", &s), Err(SseError::Unauthentic("sealed key")));
        assert_eq!(unseal_key(&kek, b"other", &s), Err(SseError::Unauthentic("sealed key")));
        let mut flipped = s.clone();
        flipped[20] ^= 1;
        assert!(unseal_key(&kek, b"ctx", &flipped).is_err());
        assert!(matches!(unseal(&kek, b"ctx", &s[..10]), Err(SseError::Format { .. })));
        assert_eq!(format!("{k:?}"), "Key(..)");
        assert_eq!(Key::from_slice(&[0; 31]), Err(SseError::KeyLength(31)));
    }

    #[test]
    fn the_sealed_stream_holds_no_plaintext_and_catches_cuts_and_flips() {
        let key = Key::random();
        let p = b"the plaintext that must not be seen on disk ".repeat(4000);
        let s = StreamSealer::seal_all(&key, &p).unwrap();
        assert_eq!(s.len() as u64, sealed_len(p.len() as u64));
        assert!(!s.windows(20).any(|w| w == &p[..20]), "plaintext in the sealed bytes");
        assert_eq!(StreamOpener::open_all(&key, &s, p.len() as u64).unwrap(), p);
        assert!(StreamOpener::open_all(&Key::random(), &s, p.len() as u64).is_err());
        let mut f = s.clone();
        f[HEADER_BYTES + 70_000] ^= 4;
        assert_eq!(StreamOpener::open_all(&key, &f, p.len() as u64), Err(SseError::Unauthentic("segment")));
        // A stream cut at a segment boundary, claimed shorter: the segment
        // then read as the last was not sealed as the last.
        let two = HEADER_BYTES + 2 * (SEGMENT_BYTES + TAG_BYTES);
        assert_eq!(StreamOpener::open_all(&key, &s[..two], 2 * SEGMENT_BYTES as u64), Err(SseError::Unauthentic("segment")));
        // The header is authenticated.
        let mut h = s.clone();
        h[7] ^= 1;
        assert!(StreamOpener::open_all(&key, &h, p.len() as u64).is_err());
    }

    #[test]
    fn two_streams_of_the_same_bytes_differ() {
        let key = Key::random();
        let p = plain(1000);
        assert_ne!(StreamSealer::seal_all(&key, &p).unwrap(), StreamSealer::seal_all(&key, &p).unwrap());
    }

    #[test]
    fn derived_keys_differ_by_purpose() {
        assert_ne!(Key::derive(b"s", "a"), Key::derive(b"s", "b"));
        assert_eq!(Key::derive(b"s", "a"), Key::derive(b"s", "a"));
    }

    proptest! {
        #[test]
        fn any_pieces_and_any_range_read_back(len in 0usize..300_000, cuts in proptest::collection::vec(0usize..300_000, 0..6), a in 0u64..300_000, b in 0u64..300_000) {
            let key = Key::random();
            let p = plain(len);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(len)).collect();
            cuts.sort();
            let mut s = StreamSealer::new(&key);
            let mut sealed = Vec::new();
            let mut at = 0;
            for c in cuts.iter().copied().chain([len]) {
                s.push(&p[at..c], &mut sealed).unwrap();
                at = c;
            }
            s.finish(&mut sealed).unwrap();
            prop_assert_eq!(sealed.len() as u64, sealed_len(len as u64));
            prop_assert_eq!(&StreamOpener::open_all(&key, &sealed, len as u64).unwrap(), &p);
            // A range, opened from its segments only, fed in odd pieces.
            let (start, end) = if len == 0 { (0, 0) } else { let (x, y) = (a % len as u64, b % len as u64); (x.min(y), x.max(y) + 1) };
            let (first, from, to) = sealed_range(len as u64, start, end);
            let mut o = StreamOpener::new(&key, &sealed[..HEADER_BYTES], len as u64, first).unwrap();
            let mut out = Vec::new();
            for piece in sealed[from as usize..to as usize].chunks(40_001) {
                o.push(piece, &mut out).unwrap();
            }
            o.finish(&mut out).unwrap();
            let skip = (start - first * SEGMENT_BYTES as u64) as usize;
            prop_assert_eq!(&out[skip..skip + (end - start) as usize], &p[start as usize..end as usize]);
        }
    }
}

//! Log records (format version 4; versions 1 to 3 are still read).
//!
//! ```text
//! offset size  field
//!  0      4    magic 0x52525453 ("STRR" little-endian)
//!  4      1    format version (4)
//!  5      1    record kind: 1 put, 2 delete, 3 ttl update
//!  6      2    key length K (1..=64)
//!  8      4    total record length, header to CRC inclusive
//! 12      8    lsn: per-replica sequence number, preserved by compaction
//! 20      8    time_ms: when the operation was accepted
//! 28      4    header CRC: CRC32C of bytes 0..28 and of the key
//! 32      K    key (tag byte first)
//! 32+K    1    actor length A (0..=255; version 4 on)
//! 33+K    A    actor: who made the change (UTF-8; empty = not known)
//! 33+K+A  ..   body (by kind, below)
//! end-4   4    CRC32C of every preceding byte of the record
//! ```
//! Put body: `expiry_ms u64 (0 = never) | content-type (u16 len, bytes) |
//! owner (u16 len, bytes) | meta count u16 | per entry (u16 len, key, u16 len,
//! value) | data_len u64 | data`. Delete body: empty. TTL-update body:
//! `expiry_ms u64`. Data comes last so a reader can serve it as one slice.
//!
//! The header CRC (new in version 2) lets recovery trust a damaged
//! record's key, kind and length when only its body is damaged: the
//! damage then concerns that key alone. Version 1 has no header CRC, the
//! key at offset 28, and is otherwise the same.
//!
//! Version 3 has version 2's layout; what is new is that its key may be a
//! versioned key (tags 2–4: tract, chunk version, read-write store value;
//! `tag | body length | body | version u64 big-endian`, see
//! [`strata_types::Key::versioned`]). Records of versions 1 and 2 hold
//! blob keys only, and a versioned key in one is refused as corrupt; a
//! release that reads only versions 1 and 2 refuses version 3 records
//! instead of misreading them.
//!
//! Version 4 adds the actor after the key: the identity that made the
//! change (an access key id, `node`, `anonymous`), which change capture
//! puts in the record's event (docs/events.md). Versions 1 to 3 have no
//! actor and decode with an empty one.

use crate::{FormatError, Reader, check_crc};
use strata_types::{Key, MAX_KEY_LEN};

/// Magic of a log record.
pub const RECORD_MAGIC: u32 = 0x5252_5453;
/// Format version written by this code.
pub const RECORD_VERSION: u8 = 4;
/// Longest actor a record holds (its length is one byte).
pub const MAX_ACTOR_LEN: usize = 255;
/// Bytes of the fixed header before the key, in records this code writes.
pub const RECORD_FIXED_BYTES: usize = 32;
/// Bytes of the fixed header before the key in version 1 records.
const RECORD_FIXED_BYTES_V1: usize = 28;

/// Bytes before the key in a record of `version` (1, 2 or 3).
fn fixed_bytes(version: u8) -> usize {
    if version == 1 { RECORD_FIXED_BYTES_V1 } else { RECORD_FIXED_BYTES }
}
/// Bytes of the trailing CRC.
pub const RECORD_CRC_BYTES: usize = 4;
/// Total user-metadata bytes (keys + values) a put may carry.
pub const MAX_META_BYTES: usize = 60 * 1024;

/// The kind of a log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RecordKind {
    /// Stores a blob.
    Put = 1,
    /// A tombstone that hides an earlier put.
    Delete = 2,
    /// Changes the expiry time of an earlier put.
    TtlUpdate = 3,
}

impl RecordKind {
    /// Parses the kind byte.
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Put),
            2 => Some(Self::Delete),
            3 => Some(Self::TtlUpdate),
            _ => None,
        }
    }
}

/// The properties and user metadata stored with a put.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PutProps {
    /// Absolute expiry in ms since the epoch; 0 means never.
    pub expiry_ms: u64,
    /// MIME type given by the client.
    pub content_type: String,
    /// Owner (service or account) given by the client.
    pub owner: String,
    /// User metadata, in the order given.
    pub meta: Vec<(String, String)>,
}

impl PutProps {
    /// Encoded size of the props part of a put body (data length field excluded).
    pub fn encoded_len(&self) -> usize {
        8 + 2 + self.content_type.len() + 2 + self.owner.len() + 2 + self.meta.iter().map(|(k, v)| 4 + k.len() + v.len()).sum::<usize>()
    }
    /// Checks the limits the layout imposes.
    pub fn validate(&self) -> Result<(), FormatError> {
        let inv = |d: String| FormatError::Invalid { what: "put properties", detail: d };
        if self.content_type.len() > u16::MAX as usize || self.owner.len() > u16::MAX as usize {
            return Err(inv("content type or owner longer than 65535 bytes".into()));
        }
        if self.meta.len() > u16::MAX as usize {
            return Err(inv("too many metadata entries".into()));
        }
        let meta_bytes: usize = self.meta.iter().map(|(k, v)| k.len() + v.len()).sum();
        if meta_bytes > MAX_META_BYTES {
            return Err(inv(format!("user metadata is {meta_bytes} bytes, limit {MAX_META_BYTES}")));
        }
        if self.meta.iter().any(|(k, v)| k.len() > u16::MAX as usize || v.len() > u16::MAX as usize) {
            return Err(inv("metadata entry longer than 65535 bytes".into()));
        }
        Ok(())
    }
}

/// Bytes the actor takes in a record this code writes.
pub fn actor_bytes(actor: &str) -> usize {
    1 + actor.len()
}

fn check_actor(actor: &str) -> Result<(), FormatError> {
    if actor.len() > MAX_ACTOR_LEN {
        return Err(FormatError::Invalid { what: "record actor", detail: format!("{} bytes, limit {MAX_ACTOR_LEN}", actor.len()) });
    }
    Ok(())
}

fn fixed_header(kind: RecordKind, key: &Key, total_len: u32, lsn: u64, time_ms: u64, actor: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(RECORD_FIXED_BYTES + key.as_bytes().len() + actor_bytes(actor) + 64);
    b.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    b.push(RECORD_VERSION);
    b.push(kind as u8);
    b.extend_from_slice(&(key.as_bytes().len() as u16).to_le_bytes());
    b.extend_from_slice(&total_len.to_le_bytes());
    b.extend_from_slice(&lsn.to_le_bytes());
    b.extend_from_slice(&time_ms.to_le_bytes());
    let header_crc = crate::crc::crc32c_append(crate::crc::crc32c(&b), key.as_bytes());
    b.extend_from_slice(&header_crc.to_le_bytes());
    b.extend_from_slice(key.as_bytes());
    b.push(actor.len() as u8);
    b.extend_from_slice(actor.as_bytes());
    b
}

/// A record header whose own CRC checks out (version 2 on): its fields can be
/// trusted even when the rest of the record is damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedHeader {
    /// Kind of record.
    pub kind: RecordKind,
    /// The key.
    pub key: Key,
    /// Encoded length of the whole record.
    pub total_len: u32,
    /// Sequence number.
    pub lsn: u64,
}

/// The header at the start of `buf` if it is a version 2, 3 or 4 header whose
/// CRC checks out; `None` for version 1 records and damaged headers.
pub fn checked_header(buf: &[u8]) -> Option<CheckedHeader> {
    let total = peek_len(buf).ok()?;
    let version = *buf.get(4)?;
    if !(2..=RECORD_VERSION).contains(&version) {
        return None;
    }
    let key_len = u16::from_le_bytes(buf.get(6..8)?.try_into().ok()?) as usize;
    let key = buf.get(RECORD_FIXED_BYTES..RECORD_FIXED_BYTES + key_len)?;
    let computed = crate::crc::crc32c_append(crate::crc::crc32c(&buf[..28]), key);
    if buf[28..32] != computed.to_le_bytes() {
        return None;
    }
    let key = Key::from_encoded(key)?;
    if !key_allowed(version, &key) {
        return None;
    }
    Some(CheckedHeader { kind: RecordKind::from_u8(buf[5])?, key, total_len: total, lsn: u64::from_le_bytes(buf[12..20].try_into().ok()?) })
}

/// The header as it was written, when a version 2 header fails its CRC
/// because of one damaged byte: the only single-byte change, among the
/// fixed header and the key, that makes its CRC check out (a CRC32C over
/// so few bytes tells any one such change apart). `None` if the header
/// checks out as it is, or no change (or more than one) explains it.
/// Recovery uses it to tell a flipped byte in a log's last record from a
/// torn write, which leaves no such header.
pub fn repair_header(buf: &[u8]) -> Option<CheckedHeader> {
    if checked_header(buf).is_some() {
        return None;
    }
    let n = buf.len().min(RECORD_FIXED_BYTES + MAX_KEY_LEN);
    let mut head = buf[..n].to_vec();
    let mut found = None;
    for p in 0..n {
        let orig = head[p];
        for v in (0..=255u8).filter(|v| *v != orig) {
            head[p] = v;
            if let Some(h) = checked_header(&head) {
                if found.is_some() {
                    return None;
                }
                found = Some(h);
            }
        }
        head[p] = orig;
    }
    found
}

/// Versioned keys exist from record version 3 on.
fn key_allowed(version: u8, key: &Key) -> bool {
    version >= 3 || !key.kind().is_versioned()
}

/// The key a record header names, trusted or not (version 1 headers have
/// no CRC of their own): `None` when the header is not even sane.
pub fn header_key(buf: &[u8]) -> Option<Key> {
    peek_len(buf).ok()?;
    let fixed = fixed_bytes(*buf.get(4)?);
    let key_len = u16::from_le_bytes(buf.get(6..8)?.try_into().ok()?) as usize;
    Key::from_encoded(buf.get(fixed..fixed + key_len)?)
}

/// Total encoded length of a put record by `actor`.
pub fn put_record_len(key: &Key, props: &PutProps, data_len: usize, actor: &str) -> usize {
    RECORD_FIXED_BYTES + key.as_bytes().len() + actor_bytes(actor) + props.encoded_len() + 8 + data_len + RECORD_CRC_BYTES
}

/// Total encoded length of a delete (`ttl` false) or TTL-update record by `actor`.
pub fn small_record_len(key: &Key, ttl: bool, actor: &str) -> usize {
    RECORD_FIXED_BYTES + key.as_bytes().len() + actor_bytes(actor) + if ttl { 8 } else { 0 } + RECORD_CRC_BYTES
}

/// Encodes a put record in two parts so the data is never copied: the prefix
/// (everything before the data) and the trailer (the CRC). Write
/// `prefix, data, trailer` in that order. `actor` made the put (empty:
/// not known).
pub fn encode_put(lsn: u64, time_ms: u64, key: &Key, props: &PutProps, actor: &str, data: &[u8]) -> Result<(Vec<u8>, [u8; 4]), FormatError> {
    props.validate()?;
    check_actor(actor)?;
    let total = put_record_len(key, props, data.len(), actor);
    let total: u32 = total.try_into().map_err(|_| FormatError::Invalid { what: "put record", detail: format!("{total} bytes exceeds 4 GiB") })?;
    let mut b = fixed_header(RecordKind::Put, key, total, lsn, time_ms, actor);
    b.extend_from_slice(&props.expiry_ms.to_le_bytes());
    for s in [&props.content_type, &props.owner] {
        b.extend_from_slice(&(s.len() as u16).to_le_bytes());
        b.extend_from_slice(s.as_bytes());
    }
    b.extend_from_slice(&(props.meta.len() as u16).to_le_bytes());
    for (k, v) in &props.meta {
        b.extend_from_slice(&(k.len() as u16).to_le_bytes());
        b.extend_from_slice(k.as_bytes());
        b.extend_from_slice(&(v.len() as u16).to_le_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    b.extend_from_slice(&(data.len() as u64).to_le_bytes());
    let crc = crate::crc::crc32c_append(crate::crc::crc32c(&b), data);
    Ok((b, crc.to_le_bytes()))
}

/// Encodes a complete delete or TTL-update record made by `actor`.
pub fn encode_small(kind: RecordKind, lsn: u64, time_ms: u64, key: &Key, expiry_ms: u64, actor: &str) -> Result<Vec<u8>, FormatError> {
    if kind == RecordKind::Put {
        return Err(FormatError::Invalid { what: "record kind", detail: "puts are encoded by encode_put".into() });
    }
    check_actor(actor)?;
    let total = small_record_len(key, kind == RecordKind::TtlUpdate, actor);
    let mut b = fixed_header(kind, key, total as u32, lsn, time_ms, actor);
    if kind == RecordKind::TtlUpdate {
        b.extend_from_slice(&expiry_ms.to_le_bytes());
    }
    let crc = crate::crc::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    Ok(b)
}

/// A record decoded from a buffer, borrowing nothing: offsets are relative to
/// the record start so the caller can slice its own (mmap'd) buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    /// Kind of record.
    pub kind: RecordKind,
    /// Sequence number.
    pub lsn: u64,
    /// When it was accepted.
    pub time_ms: u64,
    /// The key.
    pub key: Key,
    /// Encoded length, CRC included.
    pub total_len: u32,
    /// Properties, for puts.
    pub props: Option<PutProps>,
    /// New expiry, for TTL updates; the put's expiry for puts.
    pub expiry_ms: u64,
    /// Offset of the data from the record start (puts only; 0 otherwise).
    pub data_offset: u32,
    /// Length of the data (puts only).
    pub data_len: u64,
    /// Who made the change (empty: not known, and in records before version 4).
    pub actor: String,
}

/// Reads only the total length from a record's fixed header, validating
/// magic, version and kind; used to walk a log before trusting a record.
pub fn peek_len(buf: &[u8]) -> Result<u32, FormatError> {
    let mut r = Reader::new(buf, "record header");
    if r.u32()? != RECORD_MAGIC {
        return Err(FormatError::BadMagic { what: "record" });
    }
    let version = r.u8()?;
    if !(1..=RECORD_VERSION).contains(&version) {
        return Err(FormatError::Version { what: "record", version: version.into() });
    }
    RecordKind::from_u8(r.u8()?).ok_or(FormatError::Invalid { what: "record kind", detail: "unknown".into() })?;
    let key_len = r.u16()? as usize;
    if key_len == 0 || key_len > MAX_KEY_LEN {
        return Err(FormatError::Invalid { what: "record key length", detail: key_len.to_string() });
    }
    let total = r.u32()?;
    if (total as usize) < fixed_bytes(version) + key_len + RECORD_CRC_BYTES {
        return Err(FormatError::Invalid { what: "record length", detail: total.to_string() });
    }
    Ok(total)
}

/// Decodes one record at the start of `buf`, verifying its CRC over the whole
/// record (data included) when `verify_crc` is set. A version 2 header's
/// own CRC is always checked (it is a few dozen bytes).
pub fn decode(buf: &[u8], verify_crc: bool) -> Result<DecodedRecord, FormatError> {
    let total = peek_len(buf)? as usize;
    if buf.len() < total {
        return Err(FormatError::Truncated { what: "record", need: total, have: buf.len() });
    }
    let rec = &buf[..total];
    let version = rec[4];
    if verify_crc {
        check_crc("record", &rec[..total - 4], &rec[total - 4..])?;
    }
    let mut r = Reader::new(&rec[..total - 4], "record");
    r.bytes(5)?;
    let kind = RecordKind::from_u8(r.u8()?).expect("checked by peek_len");
    let key_len = r.u16()? as usize;
    r.u32()?;
    let lsn = r.u64()?;
    let time_ms = r.u64()?;
    if version >= 2 {
        let stored = r.bytes(4)?;
        let key = rec.get(RECORD_FIXED_BYTES..RECORD_FIXED_BYTES + key_len).ok_or(FormatError::Truncated { what: "record key", need: key_len, have: 0 })?;
        let computed = crate::crc::crc32c_append(crate::crc::crc32c(&rec[..28]), key);
        let stored = u32::from_le_bytes(stored.try_into().expect("4 bytes"));
        if stored != computed {
            return Err(FormatError::Checksum { what: "record header", stored, computed });
        }
    }
    let key = Key::from_encoded(r.bytes(key_len)?).ok_or(FormatError::Invalid { what: "record key", detail: "bad key tag".into() })?;
    if !key_allowed(version, &key) {
        return Err(FormatError::Invalid { what: "record key", detail: format!("a versioned key in a version {version} record") });
    }
    let actor = if version >= 4 {
        let n = r.u8()? as usize;
        r.string(n)?
    } else {
        String::new()
    };
    let mut out = DecodedRecord { kind, lsn, time_ms, key, total_len: total as u32, props: None, expiry_ms: 0, data_offset: 0, data_len: 0, actor };
    match kind {
        RecordKind::Put => {
            let expiry_ms = r.u64()?;
            let ct_len = r.u16()? as usize;
            let content_type = r.string(ct_len)?;
            let owner_len = r.u16()? as usize;
            let owner = r.string(owner_len)?;
            let n = r.u16()?;
            let mut meta = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let kl = r.u16()? as usize;
                let k = r.string(kl)?;
                let vl = r.u16()? as usize;
                meta.push((k, r.string(vl)?));
            }
            let data_len = r.u64()?;
            let data_offset = r.pos();
            if (data_offset as u64).checked_add(data_len) != Some((total - 4) as u64) {
                return Err(FormatError::Invalid { what: "put data length", detail: format!("{data_len} does not fill the record") });
            }
            out.expiry_ms = expiry_ms;
            out.props = Some(PutProps { expiry_ms, content_type, owner, meta });
            out.data_offset = data_offset as u32;
            out.data_len = data_len;
        }
        RecordKind::TtlUpdate => out.expiry_ms = r.u64()?,
        RecordKind::Delete => {}
    }
    if kind != RecordKind::Put && r.pos() != total - 4 {
        return Err(FormatError::Invalid { what: "record body", detail: "trailing bytes".into() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use strata_types::KeyKind;

    fn key(b: &[u8]) -> Key {
        Key::new(KeyKind::Blob, b).unwrap()
    }

    proptest! {
        #[test]
        fn put_round_trip(data in proptest::collection::vec(any::<u8>(), 0..300), ct in "[a-z/]{0,20}", meta in proptest::collection::vec(("[a-z]{1,8}", "\\PC{0,10}"), 0..4), lsn: u64, expiry: u64) {
            let k = key(b"abc");
            let props = PutProps { expiry_ms: expiry, content_type: ct, owner: "me".into(), meta };
            let (prefix, crc) = encode_put(lsn, 5, &k, &props, "", &data).unwrap();
            let mut rec = prefix.clone();
            rec.extend_from_slice(&data);
            rec.extend_from_slice(&crc);
            prop_assert_eq!(rec.len(), put_record_len(&k, &props, data.len(), ""));
            let d = decode(&rec, true).unwrap();
            prop_assert_eq!(d.kind, RecordKind::Put);
            prop_assert_eq!(d.lsn, lsn);
            prop_assert_eq!(d.props.as_ref(), Some(&props));
            prop_assert_eq!(&rec[d.data_offset as usize..d.data_offset as usize + d.data_len as usize], &data[..]);
            // Any single flipped bit is caught.
            for i in [0, rec.len() / 2, rec.len() - 1] {
                let mut bad = rec.clone();
                bad[i] ^= 0x10;
                prop_assert!(decode(&bad, true).is_err());
            }
            // Any truncation is caught.
            prop_assert!(decode(&rec[..rec.len() - 1], true).is_err());
        }
    }

    /// `rec` (version 4, no actor) rewritten as a record of `version` 2
    /// (version 3's layout, without the actor byte), CRCs recomputed, as
    /// the release before versioned keys wrote it.
    fn as_version_2(rec: &[u8]) -> Vec<u8> {
        let mut b = rec.to_vec();
        b[4] = 2;
        let key_len = u16::from_le_bytes([b[6], b[7]]) as usize;
        assert_eq!(b[32 + key_len], 0, "an empty actor");
        b.remove(32 + key_len);
        let total = (b.len() as u32).to_le_bytes();
        b[8..12].copy_from_slice(&total);
        let hcrc = crate::crc::crc32c_append(crate::crc::crc32c(&b[..28]), &b[32..32 + key_len]);
        b[28..32].copy_from_slice(&hcrc.to_le_bytes());
        let n = b.len();
        let crc = crate::crc::crc32c(&b[..n - 4]);
        b[n - 4..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Version 2 records decode; a versioned key is refused in them (only
    /// version 3 may carry one) and accepted in version 3.
    #[test]
    fn versioned_keys_need_version_3() {
        let blob = encode_small(RecordKind::Delete, 3, 4, &key(b"b"), 0, "").unwrap();
        assert_eq!(blob[4], 4);
        let old = as_version_2(&blob);
        assert_eq!(decode(&old, true).unwrap().key, key(b"b"));
        assert!(checked_header(&old).is_some());
        let vk = Key::versioned(KeyKind::Tract, b"guid-and-index", 9).unwrap();
        let (prefix, crc) = encode_put(5, 6, &vk, &PutProps::default(), "", b"tract").unwrap();
        let rec = [&prefix[..], b"tract", &crc[..]].concat();
        let d = decode(&rec, true).unwrap();
        assert_eq!((d.key.version(), d.key.versioned_body()), (Some(9), Some(&b"guid-and-index"[..])));
        let old = as_version_2(&rec);
        assert!(matches!(decode(&old, true), Err(FormatError::Invalid { what: "record key", .. })));
        assert_eq!(checked_header(&old), None);
        let mut future = rec.clone();
        future[4] = 5;
        assert!(matches!(decode(&future, true), Err(FormatError::Version { .. })));
    }

    /// Version 1 records, written before the header CRC, still decode.
    #[test]
    fn version_1_records_decode() {
        let k = key(b"old");
        let mut b = Vec::new();
        b.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
        b.push(1);
        b.push(RecordKind::TtlUpdate as u8);
        b.extend_from_slice(&(k.as_bytes().len() as u16).to_le_bytes());
        b.extend_from_slice(&((28 + k.as_bytes().len() + 8 + 4) as u32).to_le_bytes());
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&9u64.to_le_bytes());
        b.extend_from_slice(k.as_bytes());
        b.extend_from_slice(&555u64.to_le_bytes());
        let crc = crate::crc::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let d = decode(&b, true).unwrap();
        assert_eq!((d.kind, d.lsn, d.time_ms, d.key.clone(), d.expiry_ms), (RecordKind::TtlUpdate, 7, 9, k.clone(), 555));
        assert_eq!(header_key(&b), Some(k));
        assert_eq!(checked_header(&b), None, "a version 1 header cannot be trusted alone");
    }

    /// A damaged body leaves a version 2 header trustworthy; a damaged
    /// header does not pass.
    #[test]
    fn the_header_crc_tells_a_damaged_body_from_a_damaged_header() {
        let k = key(b"abc");
        let (prefix, crc) = encode_put(42, 5, &k, &PutProps::default(), "", &[9; 100]).unwrap();
        let mut rec = prefix.clone();
        rec.extend_from_slice(&[9; 100]);
        rec.extend_from_slice(&crc);
        let h = checked_header(&rec).unwrap();
        assert_eq!((h.kind, h.key.clone(), h.total_len as usize, h.lsn), (RecordKind::Put, k.clone(), rec.len(), 42));
        let mut body = rec.clone();
        body[prefix.len() + 50] ^= 1;
        assert!(decode(&body, true).is_err());
        assert_eq!(checked_header(&body), Some(h));
        for at in [0, 5, 13, 29, RECORD_FIXED_BYTES + 1] {
            let mut head = rec.clone();
            head[at] ^= 1;
            assert_eq!(checked_header(&head), None, "flip at {at}");
            assert!(decode(&head, false).is_err(), "a v2 header is checked even without the full CRC (flip at {at})");
        }
    }

    /// Found by the fuzzer: a data length near u64::MAX overflowed the
    /// check that it fills the record.
    #[test]
    fn a_data_length_past_the_record_is_an_error() {
        let props = PutProps::default();
        let (mut rec, crc) = encode_put(1, 1, &key(b"k"), &props, "", b"abc").unwrap();
        rec.extend_from_slice(b"abc");
        rec.extend_from_slice(&crc);
        let at = rec.len() - 4 - 3 - 8;
        rec[at..at + 8].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
        assert!(decode(&rec, false).is_err());
    }

    #[test]
    fn one_damaged_header_byte_is_repaired_and_two_are_not() {
        let k = key(b"some-key");
        let rec = encode_small(RecordKind::Delete, 77, 5, &k, 0, "").unwrap();
        let want = checked_header(&rec).unwrap();
        assert_eq!(repair_header(&rec), None, "a whole header needs no repair");
        for at in 0..RECORD_FIXED_BYTES + k.as_bytes().len() {
            for x in [0x01u8, 0x40, 0x5a, 0xff] {
                let mut bad = rec.clone();
                bad[at] ^= x;
                assert_eq!(repair_header(&bad), Some(want.clone()), "byte {at} ^ {x:#x}");
            }
        }
        let mut two = rec.clone();
        two[9] ^= 0x40;
        two[14] ^= 0x01;
        assert_ne!(repair_header(&two), Some(want), "two damaged bytes are not one");
    }

    /// Version 4 records carry who made them; one over the limit is refused.
    #[test]
    fn the_actor_is_kept_and_bounded() {
        let k = key(b"who");
        let (prefix, crc) = encode_put(1, 2, &k, &PutProps::default(), "AKEXAMPLE", b"data").unwrap();
        let rec = [&prefix[..], b"data", &crc[..]].concat();
        assert_eq!(rec.len(), put_record_len(&k, &PutProps::default(), 4, "AKEXAMPLE"));
        let d = decode(&rec, true).unwrap();
        assert_eq!((d.actor.as_str(), &rec[d.data_offset as usize..d.data_offset as usize + 4]), ("AKEXAMPLE", &b"data"[..]));
        for kind in [RecordKind::Delete, RecordKind::TtlUpdate] {
            let rec = encode_small(kind, 3, 4, &k, 9, "node").unwrap();
            assert_eq!(rec.len(), small_record_len(&k, kind == RecordKind::TtlUpdate, "node"));
            assert_eq!(decode(&rec, true).unwrap().actor, "node");
        }
        let long = "x".repeat(MAX_ACTOR_LEN + 1);
        assert!(encode_put(1, 2, &k, &PutProps::default(), &long, b"").is_err());
        assert!(encode_small(RecordKind::Delete, 1, 2, &k, 0, &long).is_err());
        assert!(encode_small(RecordKind::Put, 1, 2, &k, 0, "").is_err());
        // Version 3 records (no actor) decode with none.
        let v3 = {
            let mut b = as_version_2(&encode_small(RecordKind::Delete, 3, 4, &k, 0, "").unwrap());
            b[4] = 3;
            let hcrc = crate::crc::crc32c_append(crate::crc::crc32c(&b[..28]), &b[32..32 + k.as_bytes().len()]);
            b[28..32].copy_from_slice(&hcrc.to_le_bytes());
            let n = b.len();
            let crc = crate::crc::crc32c(&b[..n - 4]);
            b[n - 4..].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let d = decode(&v3, true).unwrap();
        assert_eq!((d.kind, d.lsn, d.actor.as_str()), (RecordKind::Delete, 3, ""));
    }

    #[test]
    fn small_records() {
        let k = key(b"xyz");
        let d = decode(&encode_small(RecordKind::Delete, 9, 1, &k, 0, "").unwrap(), true).unwrap();
        assert_eq!((d.kind, d.lsn, d.key), (RecordKind::Delete, 9, k.clone()));
        let d = decode(&encode_small(RecordKind::TtlUpdate, 10, 1, &k, 777, "").unwrap(), true).unwrap();
        assert_eq!((d.kind, d.expiry_ms), (RecordKind::TtlUpdate, 777));
    }
}

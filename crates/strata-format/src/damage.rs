//! The damage list of a partition replica (`damage.list`, version 1): the
//! ranges of its log that failed their checks and are kept out of service
//! (quarantined in place) until the keys in them are repaired from another
//! replica.
//!
//! ```text
//! offset size  field
//!  0      8    magic "STRADMG\0"
//!  8      2    format version (1)
//! 10      2    reserved (0)
//! 12      4    entry count N
//! 16      ..   N entries:
//!                segment id u64 | generation u32 | offset u64 | len u64 |
//!                detected_ms u64 | key length u8 (0: the key is unknown) | key |
//!                after_lsn u64 | flags u8 (bit 0: may hide other keys)
//! end-4   4    CRC32C of every preceding byte
//! ```

use crate::{FormatError, Reader, check_crc};
use strata_types::{Key, MAX_KEY_LEN};

const DAMAGE_MAGIC: &[u8; 8] = b"STRADMG\0";
/// Format version of the damage list.
pub const DAMAGE_VERSION: u16 = 1;
/// Most entries one damage list holds: a bound on what recovery keeps in
/// memory for a log damaged all over (past it the replica refuses to open
/// and says so, rather than serve from a log that is mostly noise).
pub const DAMAGE_ENTRIES_MAX: usize = 1 << 20;

/// One damaged range of a replica's log.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DamagedRange {
    /// Segment holding the range.
    pub segment_id: u64,
    /// The segment's generation when the damage was found.
    pub generation: u32,
    /// Byte offset of the range in the segment file.
    pub offset: u64,
    /// Length of the range.
    pub len: u64,
    /// When it was found (ms since the epoch).
    pub detected_ms: u64,
    /// The key of the record there, when its header still names one
    /// (a damaged header leaves the key unknown).
    pub key: Option<Key>,
    /// Every record in the range came after the record with this lsn (so a
    /// put with this lsn or a lower one is older than the range).
    pub after_lsn: u64,
    /// The range may hold a delete or TTL update of a key other than `key`
    /// (its header is not trustworthy, or it is small enough to be one), so
    /// keys put before it cannot be served as they are.
    pub hides_others: bool,
}

/// Encodes a damage list.
pub fn encode(entries: &[DamagedRange]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + entries.len() * 48);
    b.extend_from_slice(DAMAGE_MAGIC);
    b.extend_from_slice(&DAMAGE_VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        b.extend_from_slice(&e.segment_id.to_le_bytes());
        b.extend_from_slice(&e.generation.to_le_bytes());
        b.extend_from_slice(&e.offset.to_le_bytes());
        b.extend_from_slice(&e.len.to_le_bytes());
        b.extend_from_slice(&e.detected_ms.to_le_bytes());
        let key = e.key.as_ref().map_or(&[][..], |k| k.as_bytes());
        b.push(key.len() as u8);
        b.extend_from_slice(key);
        b.extend_from_slice(&e.after_lsn.to_le_bytes());
        b.push(u8::from(e.hides_others));
    }
    let crc = crate::crc::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

/// Decodes and checks a damage list.
pub fn decode(buf: &[u8]) -> Result<Vec<DamagedRange>, FormatError> {
    if buf.len() < 20 {
        return Err(FormatError::Truncated { what: "damage list", need: 20, have: buf.len() });
    }
    let (body, crc) = buf.split_at(buf.len() - 4);
    check_crc("damage list", body, crc)?;
    let mut r = Reader::new(body, "damage list");
    if r.bytes(8)? != DAMAGE_MAGIC {
        return Err(FormatError::BadMagic { what: "damage list" });
    }
    let version = r.u16()?;
    if version != DAMAGE_VERSION {
        return Err(FormatError::Version { what: "damage list", version: version.into() });
    }
    r.u16()?;
    let n = r.u32()? as usize;
    if n > DAMAGE_ENTRIES_MAX {
        return Err(FormatError::Invalid { what: "damage list", detail: format!("{n} entries, limit {DAMAGE_ENTRIES_MAX}") });
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (segment_id, generation, offset, len, detected_ms) = (r.u64()?, r.u32()?, r.u64()?, r.u64()?, r.u64()?);
        let key_len = r.u8()? as usize;
        let key = match key_len {
            0 => None,
            n if n <= MAX_KEY_LEN => {
                Some(Key::from_encoded(r.bytes(n)?).ok_or(FormatError::Invalid { what: "damage list key", detail: "bad key tag".into() })?)
            }
            n => return Err(FormatError::Invalid { what: "damage list key length", detail: n.to_string() }),
        };
        let after_lsn = r.u64()?;
        let hides_others = match r.u8()? {
            0 => false,
            1 => true,
            f => return Err(FormatError::Invalid { what: "damage list flags", detail: f.to_string() }),
        };
        out.push(DamagedRange { segment_id, generation, offset, len, detected_ms, key, after_lsn, hides_others });
    }
    if r.pos() != body.len() {
        return Err(FormatError::Invalid { what: "damage list", detail: "trailing bytes".into() });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_types::KeyKind;

    #[test]
    fn round_trip_and_every_flip_is_caught() {
        let k = Key::new(KeyKind::Blob, b"abc").unwrap();
        let list = vec![
            DamagedRange { segment_id: 1, generation: 0, offset: 64, len: 500, detected_ms: 9, key: Some(k), after_lsn: 7, hides_others: false },
            DamagedRange { segment_id: 2, generation: 3, offset: 4096, len: 17, detected_ms: 10, key: None, after_lsn: 40, hides_others: true },
        ];
        let b = encode(&list);
        assert_eq!(decode(&b).unwrap(), list);
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
        for i in 0..b.len() {
            let mut bad = b.clone();
            bad[i] ^= 0x04;
            assert!(decode(&bad).is_err(), "flip at {i} not caught");
        }
        assert!(decode(&b[..b.len() - 1]).is_err());
    }
}

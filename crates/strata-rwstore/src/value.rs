//! A versioned value and its stored form.
//!
//! Each version of a key is one engine record of kind
//! [`strata_types::KeyKind::KvValue`]: its body is a 128-bit hash of the
//! store name and the key, its engine version a hash of the clock's
//! counters (so a clock is written at most once per replica: a second
//! write of the same clock is refused by the engine as existing, which is
//! what an obsolete write is). The record's data is the stored form
//! (docs/formats.md, "Read-write store value"), which carries the store and
//! the key whole so a hash collision can never return another key's
//! value; the engine record's CRC32C covers it.

use crate::clock::{ClockError, VectorClock};
use bytes::Bytes;
use strata_types::{Key, KeyKind};

/// Version of the stored form.
pub const VALUE_FORMAT: u8 = 1;
/// Flag: this version is a delete (no value).
const FLAG_DELETED: u8 = 1;

/// One version of a key: a value (or a delete) and its clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The value; `None` for a delete, kept as a version so the delete
    /// reaches replicas that missed it and wins over what it deleted.
    pub value: Option<Bytes>,
    /// Its clock.
    pub clock: VectorClock,
}

impl Versioned {
    /// A value.
    pub fn value(value: impl Into<Bytes>, clock: VectorClock) -> Self {
        Self { value: Some(value.into()), clock }
    }
    /// A delete.
    pub fn deleted(clock: VectorClock) -> Self {
        Self { value: None, clock }
    }
}

/// Why stored bytes are not a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Too short or inconsistent.
    #[error("stored read-write value: {0}")]
    Malformed(String),
    /// A stored form this build does not read.
    #[error("stored read-write value format {0} is not supported (this build reads {VALUE_FORMAT})")]
    Version(u8),
    /// The clock inside.
    #[error(transparent)]
    Clock(#[from] ClockError),
}

/// The engine key of one version: store and key hashed into the body,
/// the clock's counters hashed into the version.
pub fn engine_key(store: &str, key: &[u8], clock: &VectorClock) -> Key {
    group_key(store, key).with_version(clock_version(clock)).expect("a versioned key")
}

/// An engine key of `store`/`key` (any version): names the version group.
pub fn group_key(store: &str, key: &[u8]) -> Key {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(store.as_bytes());
    h.update(&[0]);
    h.update(key);
    Key::versioned(KeyKind::KvValue, &h.digest128().to_be_bytes(), 0).expect("16 bytes fit")
}

/// The engine version of a clock: a hash of its counters (not its time).
pub fn clock_version(clock: &VectorClock) -> u64 {
    let counters = VectorClock { entries: clock.entries.clone(), timestamp_ms: 0 };
    xxhash_rust::xxh3::xxh3_64(&counters.encode())
}

/// The stored form: `format u8 | flags u8 | store length u8 | store |
/// key length u32 | key | clock | value`.
pub fn encode(store: &str, key: &[u8], v: &Versioned) -> Vec<u8> {
    let clock = v.clock.encode();
    let value = v.value.as_deref().unwrap_or_default();
    let mut b = Vec::with_capacity(7 + store.len() + key.len() + clock.len() + value.len());
    b.push(VALUE_FORMAT);
    b.push(if v.value.is_none() { FLAG_DELETED } else { 0 });
    b.push(store.len() as u8);
    b.extend_from_slice(store.as_bytes());
    b.extend_from_slice(&(key.len() as u32).to_le_bytes());
    b.extend_from_slice(key);
    b.extend_from_slice(&clock);
    b.extend_from_slice(value);
    b
}

/// A decoded stored form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The store.
    pub store: String,
    /// The key.
    pub key: Bytes,
    /// The version.
    pub versioned: Versioned,
}

/// Decodes the stored form; the value is a slice of `b` (no copy).
pub fn decode(b: &Bytes) -> Result<Stored, ValueError> {
    let bad = |d: &str| ValueError::Malformed(d.to_string());
    let format = *b.first().ok_or_else(|| bad("empty"))?;
    if format != VALUE_FORMAT {
        return Err(ValueError::Version(format));
    }
    let flags = *b.get(1).ok_or_else(|| bad("no flags"))?;
    if flags & !FLAG_DELETED != 0 {
        return Err(bad("unknown flags"));
    }
    let slen = *b.get(2).ok_or_else(|| bad("no store length"))? as usize;
    let store = std::str::from_utf8(b.get(3..3 + slen).ok_or_else(|| bad("store cut short"))?).map_err(|_| bad("store is not UTF-8"))?.to_string();
    let at = 3 + slen;
    let klen = u32::from_le_bytes(b.get(at..at + 4).ok_or_else(|| bad("no key length"))?.try_into().expect("4 bytes")) as usize;
    let key = b.slice(at + 4..(at + 4 + klen).min(b.len()));
    if key.len() != klen {
        return Err(bad("key cut short"));
    }
    let (clock, used) = VectorClock::decode_prefix(&b[at + 4 + klen..])?;
    let rest = b.slice(at + 4 + klen + used..);
    let value = if flags & FLAG_DELETED != 0 {
        if !rest.is_empty() {
            return Err(bad("a delete carries a value"));
        }
        None
    } else {
        Some(rest)
    };
    Ok(Stored { store, key, versioned: Versioned { value, clock } })
}

/// One key's versions as a line of JSON, the form stores are streamed out
/// and in (docs/formats.md, "Read-write store entries"): `{"key":
/// base64url, "versions": [{"clock": text form, "value": base64 or null}]}`.
pub fn entry_line(key: &[u8], versions: &[Versioned]) -> String {
    use base64::Engine;
    let versions: Vec<serde_json::Value> = versions
        .iter()
        .map(|v| serde_json::json!({ "clock": v.clock.to_text(), "value": v.value.as_ref().map(|b| base64::engine::general_purpose::STANDARD.encode(b)) }))
        .collect();
    serde_json::json!({ "key": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key), "versions": versions }).to_string()
}

/// Parses [`entry_line`]; the error names what is wrong.
pub fn parse_entry_line(line: &[u8]) -> Result<(Bytes, Vec<Versioned>), String> {
    use base64::Engine;
    let v: serde_json::Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let key = v["key"].as_str().ok_or("no key")?;
    let key = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(key).map_err(|e| format!("key {key:?} is not base64url: {e}"))?;
    let mut versions = Vec::new();
    for e in v["versions"].as_array().ok_or("no versions")? {
        let clock = VectorClock::parse_text(e["clock"].as_str().ok_or("a version without a clock")?).map_err(|e| e.to_string())?;
        let value = match &e["value"] {
            serde_json::Value::Null => None,
            serde_json::Value::String(s) => Some(Bytes::from(base64::engine::general_purpose::STANDARD.decode(s).map_err(|e| format!("value: {e}"))?)),
            other => return Err(format!("value {other} is neither base64 nor null")),
        };
        versions.push(Versioned { value, clock });
    }
    Ok((Bytes::from(key), versions))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_lines_round_trip_and_name_what_is_wrong() {
        let c = VectorClock::from_entries([(2, 5)], 9).unwrap();
        let versions = vec![Versioned::value(&b"\x00v"[..], c.clone()), Versioned::deleted(c.incremented(3, 10))];
        let line = entry_line(b"k\xff", &versions);
        assert_eq!(parse_entry_line(line.as_bytes()).unwrap(), (Bytes::from_static(b"k\xff"), versions));
        assert!(parse_entry_line(b"not json").unwrap_err().contains("not JSON"));
        assert!(parse_entry_line(br#"{"versions": []}"#).unwrap_err().contains("no key"));
        assert!(parse_entry_line(br#"{"key": "Zm9v", "versions": [{"clock": "1:x", "value": null}]}"#).is_err());
        assert!(parse_entry_line(br#"{"key": "Zm9v", "versions": [{"clock": "1:1", "value": 5}]}"#).unwrap_err().contains("neither"));
    }

    #[test]
    fn stored_form_round_trips_and_refuses_damage() {
        let clock = VectorClock::from_entries([(1, 3), (4, 1)], 77).unwrap();
        for v in [Versioned::value(&b"hello"[..], clock.clone()), Versioned::deleted(clock.clone()), Versioned::value(Bytes::new(), clock.clone())] {
            let b = Bytes::from(encode("users", b"\x00key\xff", &v));
            let s = decode(&b).unwrap();
            assert_eq!((s.store.as_str(), &s.key[..], &s.versioned), ("users", &b"\x00key\xff"[..], &v));
            for cut in [0, 1, 3, 9, 12] {
                assert!(decode(&b.slice(..cut)).is_err(), "cut at {cut}");
            }
        }
        let mut b = encode("s", b"k", &Versioned::deleted(clock.clone()));
        b.push(1);
        assert!(decode(&Bytes::from(b)).is_err(), "a delete with a value");
        let mut b = encode("s", b"k", &Versioned::deleted(clock));
        b[0] = 2;
        assert_eq!(decode(&Bytes::from(b)), Err(ValueError::Version(2)));
    }

    #[test]
    fn one_engine_version_per_clock_whatever_its_time() {
        let a = VectorClock::from_entries([(1, 3)], 5).unwrap();
        let same = VectorClock::from_entries([(1, 3)], 9).unwrap();
        assert_eq!(engine_key("s", b"k", &a), engine_key("s", b"k", &same));
        assert_ne!(engine_key("s", b"k", &a), engine_key("s", b"k", &a.incremented(1, 10)));
        assert_ne!(group_key("s", b"k"), group_key("t", b"k"));
        assert_ne!(group_key("a", b"bc"), group_key("ab", b"c"));
    }
}

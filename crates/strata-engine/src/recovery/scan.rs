//! Walking a log range at recovery, telling a torn tail from damage.
//!
//! The rules (docs/architecture.md, "Recovery"):
//! - A record that decodes and passes its CRC is kept.
//! - Zeros up to the end are space the writer filled ahead: the log ends
//!   there.
//! - A record whose header is sane, that lies wholly in the file, whose CRC
//!   field is not zeros and after which the log goes on sanely (a valid
//!   record, zeros, or the end) is a damaged record: quarantined in place,
//!   its key (from its header) reported, and the walk goes on after it.
//! - Otherwise the walk looks for the next valid record (one whose lsn is
//!   above the last good one, so a log stored as a blob's data cannot pass
//!   for records). Bytes up to it are a damaged range, its key known only
//!   if its header still names one.
//! - With no valid record after the failure: in the active segment, a torn
//!   tail (a batch cut short before its fsync, never acknowledged), cut off;
//!   in a sealed segment, which was whole when sealed, damage to the end.
//!
//! So a valid record is never dropped, whatever precedes it.

use crate::segment::Segment;
use strata_format::FormatError;
use strata_format::record::{self, DecodedRecord, RECORD_MAGIC};
use strata_types::Key;

/// A range found damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damaged {
    pub offset: u64,
    pub len: u64,
    pub key: Option<Key>,
}

/// What a walk found.
#[derive(Debug)]
pub(crate) struct Found {
    /// Valid records with their offsets, in log order.
    pub records: Vec<(u64, DecodedRecord)>,
    /// Damaged ranges, quarantined in place.
    pub damaged: Vec<Damaged>,
    /// Where the log's content ends: the next append goes here.
    pub end: u64,
    /// Why the bytes from `end` on were judged a torn tail (None when they
    /// are zeros or absent).
    pub torn: Option<FormatError>,
}

/// The key a record header names, if the header is sane.
fn header_key(buf: &[u8]) -> Option<Key> {
    record::peek_len(buf).ok()?;
    let key_len = u16::from_le_bytes(buf.get(6..8)?.try_into().ok()?) as usize;
    Key::from_encoded(buf.get(record::RECORD_FIXED_BYTES..record::RECORD_FIXED_BYTES + key_len)?)
}

fn all_zero(b: &[u8]) -> bool {
    b.iter().all(|x| *x == 0)
}

/// The record at the start of `buf`, if it is valid and newer than `after`.
fn valid_after(buf: &[u8], after: Option<u64>) -> Option<DecodedRecord> {
    record::decode(buf, true).ok().filter(|r| after.is_none_or(|a| r.lsn > a))
}

/// The offset of the next valid record after `pos` (exclusive) below `end`.
fn next_valid(map: &[u8], pos: usize, after: Option<u64>) -> Option<usize> {
    let magic = RECORD_MAGIC.to_le_bytes();
    (pos + 1..map.len().saturating_sub(3)).find(|&q| map[q..q + 4] == magic && valid_after(&map[q..], after).is_some())
}

/// Walks `[start, end)` of `seg`; `active` says whether it is the segment
/// being appended to (whose tail may be torn).
pub(crate) fn scan(seg: &Segment, start: u64, end: u64, active: bool) -> Found {
    let map = seg.slice(0, end);
    let mut found = Found { records: Vec::new(), damaged: Vec::new(), end, torn: None };
    let mut pos = start as usize;
    let mut last_lsn: Option<u64> = None;
    while pos < map.len() {
        let rest = &map[pos..];
        match record::decode(rest, true) {
            Ok(r) if last_lsn.is_none_or(|l| r.lsn > l) => {
                let len = r.total_len as usize;
                last_lsn = Some(r.lsn);
                found.records.push((pos as u64, r));
                pos += len;
                continue;
            }
            _ => {}
        }
        if all_zero(rest) {
            found.end = pos as u64;
            return found;
        }
        let err = match record::decode(rest, true) {
            Err(e) => e,
            Ok(r) => FormatError::Invalid { what: "record lsn", detail: format!("{} does not follow {}", r.lsn, last_lsn.unwrap_or(0)) },
        };
        // A whole record that fails its CRC, followed by a sane log.
        if let Ok(len) = record::peek_len(rest) {
            let len = len as usize;
            let sane_after = |after: &[u8]| after.is_empty() || all_zero(after) || valid_after(after, last_lsn).is_some();
            if len <= rest.len() && !all_zero(&rest[len - 4..len]) && sane_after(&rest[len..]) {
                found.damaged.push(Damaged { offset: pos as u64, len: len as u64, key: header_key(rest) });
                pos += len;
                continue;
            }
        }
        match next_valid(map, pos, last_lsn) {
            Some(q) => {
                found.damaged.push(Damaged { offset: pos as u64, len: (q - pos) as u64, key: header_key(rest) });
                pos = q;
            }
            None if active => {
                found.end = pos as u64;
                found.torn = Some(err);
                return found;
            }
            None => {
                found.damaged.push(Damaged { offset: pos as u64, len: (map.len() - pos) as u64, key: header_key(rest) });
                return found;
            }
        }
    }
    found.end = pos.min(map.len()) as u64;
    found
}

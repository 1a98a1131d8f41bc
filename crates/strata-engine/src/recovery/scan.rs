//! Walking a log range at recovery, telling a torn tail from damage.
//!
//! The rules (docs/architecture.md, "Recovery"):
//! - A record that decodes and passes its CRC is kept.
//! - Zeros up to the end are space the writer filled ahead: the log ends
//!   there.
//! - Otherwise the walk looks for the next valid record: where the failed
//!   record's header says it ends, else the first one a byte scan finds
//!   (with an lsn above the last good one, so a log stored as a blob's data
//!   cannot pass for records). The bytes up to it are a damaged range,
//!   quarantined in place, its key known if the header still names one.
//! - With no valid record after the failure, in the active segment: a
//!   record that is whole and carries a CRC (not zeros) — by its header's
//!   length, or the repaired header's when one damaged byte explains a
//!   header that fails its CRC — was written and
//!   damaged later, so it is quarantined and only the bytes after it are a
//!   torn tail (the next batch cut short before its fsync, never
//!   acknowledged) and cut; anything else from the failure on is the torn
//!   tail. In a sealed segment, which was whole when sealed, it is damage
//!   to the end, never cut.
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
    /// The lsn of the last valid record before it (0: none).
    pub after_lsn: u64,
    /// It may hold a delete or TTL update of another key.
    pub hides_others: bool,
}

/// The longest record that is not a put: a TTL update of the longest key
/// by the longest actor.
const SMALL_RECORD_BYTES_MAX: usize = record::RECORD_FIXED_BYTES + strata_types::MAX_KEY_LEN + 1 + record::MAX_ACTOR_LEN + 8 + record::RECORD_CRC_BYTES;

/// A damaged range of `len` bytes whose bytes start with `head`: its key
/// if the header names one, and whether it may hide another key's delete
/// or TTL update. A header whose own CRC checks out (version 2) is
/// trusted: the damage concerns its key alone. Otherwise only a range that
/// is exactly one record, whose header says it is a put and that is longer
/// than any other kind of record can be, is taken not to.
fn damaged(offset: usize, len: usize, head: &[u8], after_lsn: Option<u64>) -> Damaged {
    let after_lsn = after_lsn.unwrap_or(0);
    // A header that checks out, or that one damaged byte explains.
    if let Some(h) = record::checked_header(head).or_else(|| record::repair_header(head)).filter(|h| h.total_len as usize == len) {
        return Damaged { offset: offset as u64, len: len as u64, key: Some(h.key), after_lsn, hides_others: false };
    }
    let key = record::header_key(head);
    let whole_put = head.get(5) == Some(&(record::RecordKind::Put as u8))
        && record::peek_len(head).is_ok_and(|l| l as usize == len)
        && len > SMALL_RECORD_BYTES_MAX
        && key.is_some();
    Damaged { offset: offset as u64, len: len as u64, key, after_lsn, hides_others: !whole_put }
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
/// being appended to (whose tail may be torn); `prev_lsn` is the highest
/// lsn before `start` (records after it must be newer).
pub(crate) fn scan(seg: &Segment, start: u64, end: u64, active: bool, prev_lsn: Option<u64>) -> Found {
    let map = seg.slice(0, end);
    let mut found = Found { records: Vec::new(), damaged: Vec::new(), end, torn: None };
    let mut pos = start as usize;
    let mut last_lsn: Option<u64> = prev_lsn;
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
        // The length the record's header claims, if it is sane and whole.
        let claimed = record::peek_len(rest).ok().map(|l| l as usize).filter(|l| *l <= rest.len());
        // The next valid record: where the header says, else the first one
        // a byte scan finds.
        let next = match claimed {
            Some(l) if valid_after(&rest[l..], last_lsn).is_some() => Some(pos + l),
            _ => next_valid(map, pos, last_lsn),
        };
        match next {
            Some(q) => {
                found.damaged.push(damaged(pos, q - pos, rest, last_lsn));
                pos = q;
            }
            None if active => {
                // Nothing valid follows. A record that is whole and carries
                // a CRC (not the zeros of space filled ahead) was written
                // and then damaged: it stays, quarantined, and only what
                // follows it is a torn tail. Its length is the header's, or
                // the repaired header's when one damaged byte explains the
                // header (a flipped length would otherwise pass the last
                // acknowledged record off as a torn write). Anything else
                // is the torn tail.
                let claimed = match record::checked_header(rest) {
                    Some(_) => claimed,
                    None => record::repair_header(rest).map(|h| h.total_len as usize).filter(|l| *l <= rest.len()).or(claimed),
                };
                match claimed.filter(|l| !all_zero(&rest[l - 4..*l])) {
                    Some(l) => {
                        found.damaged.push(damaged(pos, l, rest, last_lsn));
                        found.end = (pos + l) as u64;
                        if !all_zero(&rest[l..]) {
                            found.torn = Some(FormatError::Invalid { what: "log tail", detail: "bytes after the last whole record".into() });
                        }
                    }
                    None => {
                        found.end = pos as u64;
                        found.torn = Some(err);
                    }
                }
                return found;
            }
            None => {
                found.damaged.push(damaged(pos, map.len() - pos, rest, last_lsn));
                return found;
            }
        }
    }
    found.end = pos.min(map.len()) as u64;
    found
}

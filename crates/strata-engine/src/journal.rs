//! The journal (Ambry §5): an in-memory, bounded list of recent records in log
//! order, so replication can ask "what came after sequence number N" cheaply.

use std::collections::VecDeque;
use std::sync::Arc;
use strata_format::RecordKind;
use strata_types::Key;

/// One journal entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// Sequence number.
    pub lsn: u64,
    /// Key written.
    pub key: Key,
    /// Kind of record.
    pub kind: RecordKind,
    /// Encoded record size.
    pub record_len: u32,
    /// When the record was written, ms since the epoch.
    pub time_ms: u64,
    /// Who made the change, when the record says (format version 4).
    pub actor: Option<Arc<str>>,
}

impl JournalEntry {
    /// The entry of record `rec`, made by `actor`.
    pub fn of(rec: &strata_format::DecodedRecord, actor: Option<Arc<str>>) -> Self {
        Self { lsn: rec.lsn, key: rec.key.clone(), kind: rec.kind, record_len: rec.total_len, time_ms: rec.time_ms, actor }
    }
}

/// A bounded journal.
#[derive(Debug)]
pub struct Journal {
    entries: VecDeque<JournalEntry>,
    capacity: usize,
    /// Every record with lsn >= this is in `entries`.
    complete_from: u64,
}

impl Journal {
    /// An empty journal keeping at most `capacity` entries, complete for
    /// every record from `complete_from` on.
    pub fn new(capacity: usize, complete_from: u64) -> Self {
        Self { entries: VecDeque::with_capacity(capacity.min(4096)), capacity: capacity.max(1), complete_from }
    }
    /// Appends, dropping the oldest entry when full.
    pub fn push(&mut self, e: JournalEntry) {
        debug_assert!(self.entries.back().is_none_or(|b| b.lsn < e.lsn), "journal must grow in lsn order");
        if self.entries.len() == self.capacity
            && let Some(old) = self.entries.pop_front()
        {
            self.complete_from = old.lsn + 1;
        }
        self.entries.push_back(e);
    }
    /// The first lsn the journal holds every record from.
    pub fn reach(&self) -> u64 {
        self.complete_from
    }
    /// Entries with lsn greater than `after`, at most `max`; `None` when the
    /// journal no longer reaches back that far (the caller must scan the log).
    pub fn since(&self, after: u64, max: usize) -> Option<Vec<JournalEntry>> {
        if after.saturating_add(1) < self.complete_from {
            return None;
        }
        let start = self.entries.partition_point(|e| e.lsn <= after);
        Some(self.entries.range(start..).take(max).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_types::KeyKind;

    #[test]
    fn since_knows_its_reach() {
        let mut j = Journal::new(3, 5);
        let k = Key::new(KeyKind::Blob, b"k").unwrap();
        assert_eq!(j.since(4, 10), Some(vec![]));
        assert_eq!(j.since(3, 10), None);
        for lsn in 5..10 {
            j.push(JournalEntry { lsn, key: k.clone(), kind: RecordKind::Put, record_len: 1, time_ms: 0, actor: None });
        }
        assert_eq!(j.since(6, 10).unwrap().iter().map(|e| e.lsn).collect::<Vec<_>>(), vec![7, 8, 9]);
        assert_eq!(j.since(5, 10), None);
        assert_eq!(j.since(8, 1).unwrap().len(), 1);
    }
}

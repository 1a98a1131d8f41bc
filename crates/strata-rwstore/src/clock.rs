//! Vector clocks (Spock §3.1.3): a counter per node that coordinated a
//! write of the value (its pseudo-master), and the wall time of the last
//! one. One clock precedes another when every counter is at most the
//! other's and they differ; two clocks where neither precedes are
//! concurrent: the values are siblings, both kept until a write that has
//! seen both (its clock follows both) replaces them.
//!
//! Byte form (docs/formats.md, "Read-write store value"): `version u8 (1) |
//! entries u16 | per entry node u64, counter u64 | timestamp_ms u64`, all
//! little-endian, entries in node order with no zero counter.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the clock's byte form.
pub const CLOCK_VERSION: u8 = 1;
/// Most entries a clock may hold (one per node that ever coordinated it).
pub const MAX_CLOCK_ENTRIES: usize = 1024;

/// How two clocks are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Occurred {
    /// The first precedes the second.
    Before,
    /// The first follows the second.
    After,
    /// Neither: the writes were concurrent.
    Concurrent,
    /// The same counters.
    Equal,
}

/// A vector clock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct VectorClock {
    /// Counter per node id (no zero counters).
    pub entries: BTreeMap<u64, u64>,
    /// Wall time (ms) of the last increment: informational, never ordering.
    #[serde(default)]
    pub timestamp_ms: u64,
}

/// Why bytes or text are not a clock.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockError {
    /// Too short, or bytes left over.
    #[error("vector clock: {0}")]
    Malformed(String),
    /// A byte form of a version this build does not read.
    #[error("vector clock version {0} is not supported (this build reads {CLOCK_VERSION})")]
    Version(u8),
}

impl VectorClock {
    /// The empty clock: what a client sends for a key it never read.
    pub fn new() -> Self {
        Self::default()
    }

    /// A clock from (node, counter) pairs.
    pub fn from_entries(entries: impl IntoIterator<Item = (u64, u64)>, timestamp_ms: u64) -> Result<Self, ClockError> {
        let mut map = BTreeMap::new();
        for (node, counter) in entries {
            if counter == 0 {
                return Err(ClockError::Malformed(format!("node {node} has a zero counter")));
            }
            if map.insert(node, counter).is_some() {
                return Err(ClockError::Malformed(format!("node {node} appears twice")));
            }
        }
        if map.len() > MAX_CLOCK_ENTRIES {
            return Err(ClockError::Malformed(format!("{} entries, at most {MAX_CLOCK_ENTRIES}", map.len())));
        }
        Ok(Self { entries: map, timestamp_ms })
    }

    /// This clock with `node`'s counter one higher (the pseudo-master's step).
    pub fn incremented(&self, node: u64, now_ms: u64) -> Self {
        let mut c = self.clone();
        *c.entries.entry(node).or_insert(0) += 1;
        c.timestamp_ms = now_ms.max(self.timestamp_ms);
        c
    }

    /// The smallest clock following or equal to both.
    pub fn merged(&self, other: &Self) -> Self {
        let mut c = self.clone();
        for (n, v) in &other.entries {
            let e = c.entries.entry(*n).or_insert(0);
            *e = (*e).max(*v);
        }
        c.timestamp_ms = self.timestamp_ms.max(other.timestamp_ms);
        c
    }

    /// The smallest clock following or equal to every one of `clocks`: what
    /// a put that replaces them all sends (the empty clock for none).
    pub fn covering<'a>(clocks: impl IntoIterator<Item = &'a VectorClock>) -> Self {
        clocks.into_iter().fold(Self::new(), |c, o| c.merged(o))
    }

    /// How this clock relates to `other`.
    pub fn compare(&self, other: &Self) -> Occurred {
        let (mut less, mut more) = (false, false);
        let nodes: std::collections::BTreeSet<&u64> = self.entries.keys().chain(other.entries.keys()).collect();
        for n in nodes {
            let a = self.entries.get(n).copied().unwrap_or(0);
            let b = other.entries.get(n).copied().unwrap_or(0);
            less |= a < b;
            more |= a > b;
        }
        match (less, more) {
            (false, false) => Occurred::Equal,
            (true, false) => Occurred::Before,
            (false, true) => Occurred::After,
            (true, true) => Occurred::Concurrent,
        }
    }

    /// The byte form.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(3 + self.entries.len() * 16 + 8);
        b.push(CLOCK_VERSION);
        b.extend_from_slice(&(self.entries.len() as u16).to_le_bytes());
        for (n, c) in &self.entries {
            b.extend_from_slice(&n.to_le_bytes());
            b.extend_from_slice(&c.to_le_bytes());
        }
        b.extend_from_slice(&self.timestamp_ms.to_le_bytes());
        b
    }

    /// Decodes the byte form at the start of `b`; returns the clock and the
    /// bytes it took.
    pub fn decode_prefix(b: &[u8]) -> Result<(Self, usize), ClockError> {
        let short = || ClockError::Malformed(format!("{} bytes is too short", b.len()));
        let version = *b.first().ok_or_else(short)?;
        if version != CLOCK_VERSION {
            return Err(ClockError::Version(version));
        }
        let n = u16::from_le_bytes(b.get(1..3).ok_or_else(short)?.try_into().map_err(|_| short())?) as usize;
        let len = 3 + n * 16 + 8;
        let body = b.get(..len).ok_or_else(short)?;
        let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let mut prev = None;
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            let (node, counter) = (u64_at(3 + i * 16), u64_at(3 + i * 16 + 8));
            if prev.is_some_and(|p| p >= node) {
                return Err(ClockError::Malformed("entries out of node order".into()));
            }
            prev = Some(node);
            entries.push((node, counter));
        }
        Ok((Self::from_entries(entries, u64_at(3 + n * 16))?, len))
    }

    /// Decodes exactly the byte form.
    pub fn decode(b: &[u8]) -> Result<Self, ClockError> {
        let (c, used) = Self::decode_prefix(b)?;
        if used != b.len() {
            return Err(ClockError::Malformed(format!("{} bytes after the clock", b.len() - used)));
        }
        Ok(c)
    }

    /// The text form used in HTTP headers: `node:counter,node:counter@timestamp`
    /// (empty for the empty clock).
    pub fn to_text(&self) -> String {
        let entries: Vec<String> = self.entries.iter().map(|(n, c)| format!("{n}:{c}")).collect();
        if self.timestamp_ms == 0 { entries.join(",") } else { format!("{}@{}", entries.join(","), self.timestamp_ms) }
    }

    /// Parses [`VectorClock::to_text`].
    pub fn parse_text(s: &str) -> Result<Self, ClockError> {
        let bad = |d: String| ClockError::Malformed(format!("{s:?}: {d}"));
        let (entries, ts) = match s.split_once('@') {
            Some((e, t)) => (e, t.parse::<u64>().map_err(|e| bad(format!("timestamp: {e}")))?),
            None => (s, 0),
        };
        let mut pairs = Vec::new();
        for part in entries.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (n, c) = part.split_once(':').ok_or_else(|| bad(format!("{part:?} is not node:counter")))?;
            let n = n.parse::<u64>().map_err(|e| bad(format!("node {n:?}: {e}")))?;
            let c = c.parse::<u64>().map_err(|e| bad(format!("counter {c:?}: {e}")))?;
            pairs.push((n, c));
        }
        Self::from_entries(pairs, ts).map_err(|e| bad(e.to_string()))
    }
}

impl std::fmt::Display for VectorClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}]", self.to_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(e: &[(u64, u64)]) -> VectorClock {
        VectorClock::from_entries(e.iter().copied(), 0).unwrap()
    }

    #[test]
    fn ordering_as_the_paper_describes() {
        let a = c(&[(1, 10), (2, 3)]);
        assert_eq!(a.compare(&a.clone()), Occurred::Equal);
        assert_eq!(a.compare(&a.incremented(1, 5)), Occurred::Before);
        assert_eq!(a.incremented(2, 5).compare(&a), Occurred::After);
        assert_eq!(a.incremented(1, 5).compare(&a.incremented(2, 5)), Occurred::Concurrent);
        assert_eq!(VectorClock::new().compare(&a), Occurred::Before);
        let m = a.incremented(1, 5).merged(&a.incremented(2, 6));
        assert_eq!(m, VectorClock::from_entries([(1, 11), (2, 4)], 6).unwrap());
    }

    #[test]
    fn bad_forms_are_refused_with_a_reason() {
        assert!(VectorClock::parse_text("1:0").is_err(), "zero counter");
        assert!(VectorClock::parse_text("1:2,1:3").is_err(), "a node twice");
        assert!(VectorClock::parse_text("x:2").is_err());
        assert!(VectorClock::parse_text("1-2").is_err());
        assert_eq!(VectorClock::parse_text("").unwrap(), VectorClock::new());
        let b = c(&[(1, 2), (5, 1)]).encode();
        assert!(matches!(VectorClock::decode(&b[..b.len() - 1]), Err(ClockError::Malformed(_))));
        let mut v = b.clone();
        v[0] = 9;
        assert_eq!(VectorClock::decode(&v), Err(ClockError::Version(9)));
        let mut swapped = b.clone();
        swapped[3..19].copy_from_slice(&c(&[(7, 1)]).encode()[3..19]);
        assert!(VectorClock::decode(&swapped).is_err(), "entries out of order");
    }

    proptest! {
        #[test]
        fn forms_round_trip_and_compare_is_antisymmetric(a in proptest::collection::btree_map(0..6u64, 1..5u64, 0..5), b in proptest::collection::btree_map(0..6u64, 1..5u64, 0..5), ts: u64) {
            let (a, b) = (VectorClock { entries: a, timestamp_ms: ts }, VectorClock { entries: b, timestamp_ms: 0 });
            prop_assert_eq!(VectorClock::decode(&a.encode()).unwrap(), a.clone());
            prop_assert_eq!(VectorClock::parse_text(&a.to_text()).unwrap(), a.clone());
            let flip = match a.compare(&b) { Occurred::Before => Occurred::After, Occurred::After => Occurred::Before, o => o };
            prop_assert_eq!(b.compare(&a), flip);
            let m = a.merged(&b);
            prop_assert!(matches!(m.compare(&a), Occurred::After | Occurred::Equal));
            prop_assert!(matches!(m.compare(&b), Occurred::After | Occurred::Equal));
        }
    }
}

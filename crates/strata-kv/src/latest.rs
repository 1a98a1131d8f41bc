//! A store's `latest` file: which version is live, and the last changes of
//! its versions (docs/formats.md, "Read-only store files").
//!
//! The history is in the same file as the pointer so that a swap and the
//! record of it are one atomic replace: change capture (docs/events.md)
//! reads the history, and no crash can leave a swap without its record or
//! a record without its swap. Version 2:
//!
//! ```text
//! version-7                 the live version ("none": loaded, never live)
//! strata-latest 2
//! next 13                   the sequence number the next change gets
//! change 12 1700000000000 swapped 7 AKIDEXAMPLE
//! change 11 1699999990000 loaded 7 -
//! crc32c 0x1a2b3c4d         CRC32C of every byte above this line
//! ```
//!
//! Version 1 is the first line alone (no history); it still opens.

use crate::version::VersionError;
use std::collections::VecDeque;

/// Changes kept in the file; a capture target further behind loses the
/// older ones (counted where it reads them).
pub const HISTORY_MAX: usize = 64;

/// What happened to a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// A version was copied or fetched in and checked (not yet live).
    Loaded,
    /// A version was made live.
    Swapped,
    /// An older version was made live again.
    RolledBack,
}

impl ChangeKind {
    /// The word in the file.
    pub fn word(self) -> &'static str {
        match self {
            Self::Loaded => "loaded",
            Self::Swapped => "swapped",
            Self::RolledBack => "rolled-back",
        }
    }

    fn parse(w: &str) -> Option<Self> {
        Some(match w {
            "loaded" => Self::Loaded,
            "swapped" => Self::Swapped,
            "rolled-back" => Self::RolledBack,
            _ => return None,
        })
    }
}

/// One change of a store's versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Position in the store's history: strictly increasing from 1.
    pub seq: u64,
    /// When, ms since the Unix epoch.
    pub time_ms: u64,
    /// What happened.
    pub kind: ChangeKind,
    /// The version it happened to.
    pub version: u64,
    /// The access key that asked for it, if known.
    pub who: Option<String>,
}

/// Who asks for a change, and when (from the caller's clock).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct By {
    /// The access key, if known.
    pub who: Option<String>,
    /// Now, ms since the Unix epoch.
    pub now_ms: u64,
}

impl By {
    /// A change asked for by `who` at `now_ms`.
    pub fn new(who: Option<String>, now_ms: u64) -> Self {
        Self { who, now_ms }
    }

    /// A change with no known identity, timed by the system clock (tools and tests).
    pub fn system() -> Self {
        Self { who: None, now_ms: strata_types::Clock::now_ms(&strata_types::SystemClock) }
    }
}

/// The parsed file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latest {
    /// The live version.
    pub live: Option<u64>,
    /// The next change's sequence number minus one (the last given).
    pub last_seq: u64,
    /// The newest changes, oldest first, at most [`HISTORY_MAX`].
    pub history: VecDeque<Change>,
}

impl Latest {
    /// Parses the file's bytes (`what` names it in errors).
    pub fn parse(text: &str, what: &str) -> Result<Self, VersionError> {
        let bad = |detail: String| VersionError::Invalid(format!("{what}: {detail}"));
        let mut lines = text.lines();
        let first = lines.next().unwrap_or("").trim();
        let live = match first {
            "none" => None,
            v => Some(crate::store::parse_version(v).ok_or_else(|| bad(format!("names {v:?}, not a version")))?),
        };
        let Some(header) = lines.next() else { return Ok(Self { live, ..Self::default() }) };
        if header != "strata-latest 2" {
            return Err(bad(format!("unknown layout {header:?} (this build reads version 2)")));
        }
        let body_end = text.rfind("crc32c ").ok_or_else(|| bad("no checksum line".into()))?;
        let want = text[body_end..].trim().strip_prefix("crc32c 0x").and_then(|h| u32::from_str_radix(h, 16).ok());
        let have = crc32c::crc32c(&text.as_bytes()[..body_end]);
        if want != Some(have) {
            return Err(bad(format!("checksum mismatch (computed {have:#010x}): the file is damaged")));
        }
        let mut me = Self { live, ..Self::default() };
        for line in text[..body_end].lines().skip(2) {
            let f: Vec<&str> = line.split(' ').collect();
            match f.as_slice() {
                ["next", n] => me.last_seq = n.parse::<u64>().map_err(|_| bad(format!("bad line {line:?}")))?.saturating_sub(1),
                ["change", seq, time, kind, version, who] => {
                    let num = |s: &str| s.parse::<u64>().map_err(|_| bad(format!("bad line {line:?}")));
                    me.history.push_back(Change {
                        seq: num(seq)?,
                        time_ms: num(time)?,
                        kind: ChangeKind::parse(kind).ok_or_else(|| bad(format!("unknown change {kind:?}")))?,
                        version: num(version)?,
                        who: (*who != "-").then(|| (*who).to_owned()),
                    });
                }
                _ => return Err(bad(format!("bad line {line:?}"))),
            }
        }
        Ok(me)
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = match self.live {
            Some(n) => format!("version-{n}\n"),
            None => "none\n".to_owned(),
        };
        s.push_str("strata-latest 2\n");
        s.push_str(&format!("next {}\n", self.last_seq + 1));
        for c in &self.history {
            s.push_str(&format!("change {} {} {} {} {}\n", c.seq, c.time_ms, c.kind.word(), c.version, c.who.as_deref().unwrap_or("-")));
        }
        let crc = crc32c::crc32c(s.as_bytes());
        s.push_str(&format!("crc32c {crc:#010x}\n"));
        s.into_bytes()
    }

    /// Appends a change, keeping the newest [`HISTORY_MAX`].
    pub fn push(&mut self, kind: ChangeKind, version: u64, by: &By) {
        self.last_seq += 1;
        // An identity is one word in the file.
        let who = by.who.as_ref().map(|w| w.chars().filter(|c| !c.is_whitespace()).collect::<String>()).filter(|w| !w.is_empty() && w != "-");
        self.history.push_back(Change { seq: self.last_seq, time_ms: by.now_ms, kind, version, who });
        while self.history.len() > HISTORY_MAX {
            self.history.pop_front();
        }
    }

    /// The changes after `seq`, oldest first, and whether the history still
    /// reaches back to `seq` (if not, the changes between were dropped).
    pub fn after(&self, seq: u64) -> (Vec<Change>, bool) {
        let reaches = self.history.front().is_none_or(|c| c.seq <= seq + 1) || seq >= self.last_seq;
        (self.history.iter().filter(|c| c.seq > seq).cloned().collect(), reaches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_round_trips_and_version_1_still_opens() {
        let mut l = Latest { live: Some(3), ..Latest::default() };
        l.push(ChangeKind::Loaded, 3, &By::new(Some("AK 1".into()), 10));
        l.push(ChangeKind::Swapped, 3, &By::new(None, 11));
        let bytes = l.encode();
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("version-3\nstrata-latest 2\nnext 3\nchange 1 10 loaded 3 AK1\nchange 2 11 swapped 3 -\ncrc32c 0x"), "{text}");
        let back = Latest::parse(&text, "latest").unwrap();
        assert_eq!(back.history[0].who.as_deref(), Some("AK1"));
        assert_eq!((back.live, back.last_seq, back.history.len()), (Some(3), 2, 2));
        assert_eq!(Latest::parse("version-9\n", "latest").unwrap(), Latest { live: Some(9), ..Latest::default() });
        // A flipped byte is refused, not misread.
        let bad = text.replacen("swapped 3", "swapped 4", 1);
        assert!(Latest::parse(&bad, "latest").unwrap_err().to_string().contains("checksum mismatch"));
        assert!(Latest::parse("version-x\n", "latest").is_err());
    }

    #[test]
    fn the_history_is_bounded_and_says_when_it_no_longer_reaches_back() {
        let mut l = Latest::default();
        for v in 1..=(HISTORY_MAX as u64 + 10) {
            l.push(ChangeKind::Swapped, v, &By::new(None, v));
        }
        assert_eq!(l.history.len(), HISTORY_MAX);
        let (after, reaches) = l.after(l.last_seq - 2);
        assert_eq!((after.len(), reaches), (2, true));
        let (after, reaches) = l.after(3);
        assert_eq!((after.len(), reaches), (HISTORY_MAX, false));
        assert_eq!(l.after(l.last_seq), (Vec::new(), true));
    }
}

//! The audit log: every administrative action a node served (who, what,
//! when, with what result) and every refused attempt at one, as JSON lines
//! in `<data>/audit.log`. An action's line is written and fdatasync'd
//! before its answer goes out; a refused attempt's line is written but
//! made durable with the next action's (anyone can send refused requests:
//! they must not buy an fsync each). Admins read it with `GET /admin/audit`
//! (`strata audit`).
//!
//! A line is one JSON object whose last field, `crc32c`, is the CRC32C of
//! the line's bytes before `,"crc32c"`: a reader tells a damaged or torn
//! line from a good one (docs/formats.md). Past [`ROTATE_BYTES`] the log is
//! renamed `audit.log.1` (replacing the one before) and a new one started.

use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The format version every line carries (`"v"`).
pub const VERSION: u32 = 1;
/// Size past which the log is rotated.
const ROTATE_BYTES: u64 = 64 << 20;
/// Most entries one read returns.
pub const READ_MAX: usize = 10_000;

/// One administrative action.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct AuditEntry {
    /// Format version.
    pub v: u32,
    /// When, ms since the epoch.
    pub time_ms: u64,
    /// The node that served it (cluster mode).
    pub node: Option<u64>,
    /// Who: `key:<access key id>`, `node` (a cluster certificate),
    /// `anonymous`, or `open` (authentication off).
    pub who: String,
    /// The client's address.
    pub remote: Option<String>,
    /// `METHOD /path?query`.
    pub action: String,
    /// The request's JSON body, if small (at most 1 KiB; secrets never
    /// travel in requests).
    pub detail: Option<serde_json::Value>,
    /// The HTTP status answered.
    pub status: u16,
    /// `ok`, `denied` (401/403) or `failed`.
    pub result: String,
}

/// The log of one node.
pub struct AuditLog {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

fn open(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)
}

/// The line for `entry`, newline included.
pub fn encode(entry: &AuditEntry) -> Vec<u8> {
    let mut line = serde_json::to_vec(entry).expect("an audit entry serializes");
    line.pop(); // the closing brace
    let crc = crc32c::crc32c(&line);
    line.extend_from_slice(format!(",\"crc32c\":\"{crc:08x}\"}}\n").as_bytes());
    line
}

/// The entry of a line, if its checksum holds.
pub fn decode(line: &[u8]) -> Option<AuditEntry> {
    let at = line.windows(11).rposition(|w| w == b",\"crc32c\":\"")?;
    let stored = line.get(at + 11..at + 19)?;
    let stored = u32::from_str_radix(std::str::from_utf8(stored).ok()?, 16).ok()?;
    if crc32c::crc32c(&line[..at]) != stored {
        return None;
    }
    serde_json::from_slice(line).ok()
}

impl AuditLog {
    /// The log at `path` (created on the first entry).
    pub fn new(path: PathBuf) -> Self {
        Self { path, file: Mutex::new(None) }
    }

    /// Appends `entry`, durable before this returns when `durable`. A
    /// failure is logged, not returned: the action has happened already.
    pub fn record(&self, entry: &AuditEntry, durable: bool) {
        if let Err(e) = self.append(&encode(entry), durable) {
            tracing::error!(path = %self.path.display(), error = %e, action = entry.action, who = entry.who, "could not write the audit log");
        }
    }

    fn append(&self, line: &[u8], durable: bool) -> std::io::Result<()> {
        let mut guard = self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            *guard = Some(open(&self.path)?);
        }
        let f = guard.as_mut().expect("opened above");
        if f.metadata()?.len() > ROTATE_BYTES {
            std::fs::rename(&self.path, self.path.with_extension("log.1"))?;
            *f = open(&self.path)?;
        }
        f.write_all(line)?;
        if durable { f.sync_data() } else { Ok(()) }
    }

    /// The last `limit` good entries, oldest first, and how many lines
    /// failed their checksum.
    pub fn tail(&self, limit: usize) -> std::io::Result<(Vec<AuditEntry>, usize)> {
        let mut entries = Vec::new();
        let mut damaged = 0;
        for path in [self.path.with_extension("log.1"), self.path.clone()] {
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                match decode(line) {
                    Some(e) => entries.push(e),
                    None => damaged += 1,
                }
            }
        }
        let skip = entries.len().saturating_sub(limit.min(READ_MAX));
        Ok((entries.split_off(skip), damaged))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u64) -> AuditEntry {
        AuditEntry {
            v: VERSION,
            time_ms: n,
            node: None,
            who: "key:SK".into(),
            remote: Some("127.0.0.1:1".into()),
            action: format!("POST /admin/s3/keys?n={n}"),
            detail: Some(serde_json::json!({ "name": "x" })),
            status: 201,
            result: "ok".into(),
        }
    }

    #[test]
    fn entries_read_back_and_a_damaged_line_is_counted_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::new(dir.path().join("audit.log"));
        for n in 0..5 {
            log.record(&entry(n), n % 2 == 0);
        }
        let (got, damaged) = log.tail(3).unwrap();
        assert_eq!((got, damaged), (vec![entry(2), entry(3), entry(4)], 0));
        let mut bytes = std::fs::read(dir.path().join("audit.log")).unwrap();
        let i = bytes.iter().position(|b| *b == b'P').unwrap();
        bytes[i] = b'G'; // "POST" becomes "GOST" in the first line
        std::fs::write(dir.path().join("audit.log"), &bytes).unwrap();
        let (got, damaged) = log.tail(100).unwrap();
        assert_eq!((got.len(), damaged), (4, 1));
        assert_eq!(decode(b"{\"v\":1}"), None);
    }
}

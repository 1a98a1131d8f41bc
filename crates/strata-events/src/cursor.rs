//! A target's durable cursor: the sequence number of the last event it
//! has, so a restarted sender resumes after it (docs/formats.md "Event
//! cursor"). 24 bytes: magic `SECU`, version u16 = 1, two zero bytes, the
//! sequence number (u64 LE), CRC32C of the first 16 bytes (u32 LE), four
//! zero bytes. Replaced atomically: written to a temporary file, fsync'd,
//! renamed over the old one, and the directory fsync'd.

use crate::EventError;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"SECU";
const VERSION: u16 = 1;
const LEN: usize = 24;

/// A durable cursor in a file.
#[derive(Debug)]
pub struct Cursor {
    path: PathBuf,
    seq: u64,
}

impl Cursor {
    /// Opens the cursor at `path`: 0 (nothing delivered) if the file does
    /// not exist; an error if it is damaged, rather than a guess that
    /// would skip or repeat events.
    pub fn open(path: &Path) -> Result<Self, EventError> {
        let seq = match std::fs::read(path) {
            Ok(bytes) => decode(&bytes).map_err(|why| EventError::DamagedCursor { path: path.display().to_string(), why })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(EventError::Io { what: format!("reading {}", path.display()), source: e }),
        };
        Ok(Self { path: path.to_owned(), seq })
    }

    /// The last sequence number delivered (0: none).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Durably records `seq` as delivered.
    pub fn store(&mut self, seq: u64) -> Result<(), EventError> {
        strata_fs::replace_file(&self.path, &encode(seq)).map_err(EventError::io(format!("replacing {}", self.path.display())))?;
        self.seq = seq;
        Ok(())
    }
}

fn encode(seq: u64) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[0..4].copy_from_slice(MAGIC);
    b[4..6].copy_from_slice(&VERSION.to_le_bytes());
    b[8..16].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&b[0..16]);
    b[16..20].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode(b: &[u8]) -> Result<u64, String> {
    if b.len() != LEN {
        return Err(format!("{} bytes, not {LEN}", b.len()));
    }
    if &b[0..4] != MAGIC {
        return Err("not a cursor file (wrong magic)".into());
    }
    let version = u16::from_le_bytes([b[4], b[5]]);
    if version != VERSION {
        return Err(format!("version {version}, this Strata reads {VERSION}"));
    }
    let crc = u32::from_le_bytes([b[16], b[17], b[18], b[19]]);
    if crc != crc32c::crc32c(&b[0..16]) {
        return Err("checksum mismatch".into());
    }
    let mut seq = [0u8; 8];
    seq.copy_from_slice(&b[8..16]);
    Ok(u64::from_le_bytes(seq))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_survives_reopening_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file.cursor");
        let mut c = Cursor::open(&path).unwrap();
        assert_eq!(c.seq(), 0);
        c.store(41).unwrap();
        c.store(42).unwrap();
        assert_eq!(Cursor::open(&path).unwrap().seq(), 42);
        assert!(!path.with_extension("tmp").exists());
        let good = std::fs::read(&path).unwrap();
        for i in 0..20 {
            let mut bad = good.clone();
            bad[i] ^= 0x10;
            std::fs::write(&path, &bad).unwrap();
            assert!(matches!(Cursor::open(&path), Err(EventError::DamagedCursor { .. })), "byte {i} flipped");
        }
        std::fs::write(&path, &good[..10]).unwrap();
        assert!(Cursor::open(&path).is_err(), "a short file");
    }
}

//! The root key file (`kms-root.key`, version 1): the key that seals the
//! KMS keys kept in the names. JSON, mode 0600, written once:
//! `{"format":"strata-kms-root","version":1,"key":"<64 hex digits>","crc32c":"<8 hex digits>"}`,
//! the CRC32C over the key's hex. Keep it off the data disks in
//! production (`strata server --kms-root-key`); whoever holds it and the
//! names can read every SSE-S3 and SSE-KMS object.

use crate::Key;
use std::io::Write;
use std::path::Path;

const FORMAT: &str = "strata-kms-root";
const VERSION: u32 = 1;

/// Why the root key file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RootKeyError {
    /// Reading or writing it failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// It is not a root key file of a version this release reads, or it is damaged.
    #[error("{path}: {detail}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
}

#[derive(serde::Serialize, serde::Deserialize)]
struct File {
    format: String,
    version: u32,
    key: String,
    crc32c: String,
}

fn crc(hex_key: &str) -> String {
    format!("{:08x}", crc32c::crc32c(hex_key.as_bytes()))
}

/// Reads the root key at `path`.
pub fn load(path: &Path) -> Result<Key, RootKeyError> {
    let p = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| RootKeyError::Io { path: p.clone(), source })?;
    let invalid = |detail: String| RootKeyError::Invalid { path: p.clone(), detail };
    let f: File = serde_json::from_slice(&bytes).map_err(|e| invalid(format!("not a root key file: {e}")))?;
    if f.format != FORMAT || f.version != VERSION {
        return Err(invalid(format!("format {:?} version {}, expected {FORMAT:?} version {VERSION}", f.format, f.version)));
    }
    if crc(&f.key) != f.crc32c {
        return Err(invalid("its checksum does not match: the file is damaged".into()));
    }
    let raw = hex::decode(&f.key).map_err(|e| invalid(format!("key: {e}")))?;
    Key::from_slice(&raw).map_err(|e| invalid(e.to_string()))
}

/// Reads the root key at `path`, creating a random one (mode 0600) if the
/// file does not exist.
pub fn load_or_create(path: &Path) -> Result<Key, RootKeyError> {
    if path.exists() {
        return load(path);
    }
    let p = path.display().to_string();
    let key = Key::random();
    let hex_key = hex::encode(key.bytes());
    let f = File { format: FORMAT.into(), version: VERSION, crc32c: crc(&hex_key), key: hex_key };
    let body = serde_json::to_vec(&f).map_err(|e| RootKeyError::Invalid { path: p.clone(), detail: e.to_string() })?;
    let tmp = path.with_extension("tmp");
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut out = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
        out.write_all(&body)?;
        out.write_all(b"\n")?;
        out.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    };
    write().map_err(|source| RootKeyError::Io { path: p, source })?;
    load(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_read_back_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kms-root.key");
        let k = load_or_create(&path).unwrap();
        assert_eq!(load_or_create(&path).unwrap(), k);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        let i = text.find("\"key\":\"").unwrap() + 7;
        let mut damaged = text.into_bytes();
        damaged[i] = if damaged[i] == b'0' { b'1' } else { b'0' };
        std::fs::write(&path, damaged).unwrap();
        assert!(matches!(load(&path), Err(RootKeyError::Invalid { .. })), "a damaged key was read");
        std::fs::write(&path, b"{}").unwrap();
        assert!(load(&path).is_err());
    }
}

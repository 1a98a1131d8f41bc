//! Durable file operations every layer that writes files shares: an
//! atomic, fsync'd replacement of a small file, a directory fsync, the
//! filesystem's size and free space, zero-filling a log ahead of its end.
//!
//! Owns: the order of syscalls that makes a write survive a crash.
//! Errors are plain `std::io::Error`s; each caller adds its own context.
//!
//! Layer rule (checked by the test command): may use no Strata crate;
//! never an async runtime or an HTTP crate.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Makes a directory's entries (creations, renames, unlinks) durable.
pub fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all())
}

/// Bytes available to unprivileged writers on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> std::io::Result<u64> {
    let s = statvfs(path)?;
    Ok(s.f_bavail as u64 * s.f_frsize as u64)
}

/// Size of the filesystem holding `path`, in bytes.
pub fn total_bytes(path: &Path) -> std::io::Result<u64> {
    let s = statvfs(path)?;
    Ok(s.f_blocks as u64 * s.f_frsize as u64)
}

fn statvfs(path: &Path) -> std::io::Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains NUL"))?;
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(s)
}

/// Writes `bytes` to `path` so that a crash leaves either the old file or
/// the new one: a temporary file beside it, fsync'd, renamed over it, and
/// the directory fsync'd.
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new().create(true).write(true).truncate(true).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    fsync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Logs are zero-filled ahead of their end in steps of this size (see
/// [`zero_fill_ahead`]).
pub const ZERO_STEP: u64 = 1 << 20;

/// Makes sure `file`, a log whose bytes from `zeroed` on are zeros (or
/// absent), is zero-filled up to at least `end`: if `end` passes `zeroed`,
/// writes zeros from `zeroed` to the next [`ZERO_STEP`] boundary past `end`
/// (but not beyond `cap`). Returns the new zero-filled length.
///
/// Best effort: zeros are only an optimisation, so a failed write (a full
/// disk) cuts the file back to its length at the call (`zeroed`, which
/// callers keep equal to it) and returns that; the caller's own write then
/// appends as it would without them, and fails only if it cannot be
/// written itself (a small delete still fits on a full disk).
///
/// Why: an append that grows a file costs ext4 a journal commit at its
/// fdatasync; overwriting blocks already written inside the file does not
/// (`python3 scripts/fsync-cost.py`: a 4 KiB write and fdatasync took
/// 175–290 µs appending, 111–131 µs over zeros, in two runs on this
/// machine's ext4). The caller's next fdatasync makes the zeros durable;
/// recovery treats zeros after the last record as this space, not a tear.
pub fn zero_fill_ahead(file: &File, zeroed: u64, end: u64, cap: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    if end <= zeroed {
        return zeroed;
    }
    let to = (end.div_ceil(ZERO_STEP) * ZERO_STEP).min(cap).max(end);
    let mut at = zeroed;
    while at < to {
        let n = (to - at).min(ZEROS.len() as u64);
        if let Err(e) = file.write_all_at(&ZEROS[..n as usize], at) {
            // Give back what this call wrote (on a full disk, the last free
            // blocks the caller's own write needs); `zeroed` is the file's
            // length when it started.
            tracing::debug!(error = %e, at, "zero-filling ahead of a log failed; appending without it");
            let _ = file.set_len(zeroed);
            return zeroed;
        }
        at += n;
    }
    to
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_filling_that_cannot_write_gives_up_quietly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, [7u8; 100]).unwrap();
        // Read-only: every write fails, as on a full disk.
        let ro = File::open(&path).unwrap();
        assert_eq!(zero_fill_ahead(&ro, 100, 200, u64::MAX), 100, "nothing was zeroed");
        let rw = OpenOptions::new().write(true).open(&path).unwrap();
        assert_eq!(zero_fill_ahead(&rw, 100, 200, u64::MAX), ZERO_STEP);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), ZERO_STEP);
    }

    #[test]
    fn a_replaced_file_holds_the_new_bytes_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("map");
        replace_file(&path, b"old").unwrap();
        replace_file(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert!(!path.with_extension("tmp").exists());
        assert!(free_bytes(dir.path()).unwrap() <= total_bytes(dir.path()).unwrap());
    }
}

//! Small filesystem helpers: directory fsync, free space, atomic file writes.

use crate::error::{Result, io};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

/// Makes a directory's entries (creations, renames, unlinks) durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(format!("fsync directory {}", dir.display())))
}

/// Bytes available to unprivileged writers on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| crate::EngineError::Invalid("path contains NUL".into()))?;
    // SAFETY: statvfs writes into the zeroed struct we own; `c` is a valid C string.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c.as_ptr(), &mut s) };
    if rc != 0 {
        return Err(io(format!("statvfs {}", path.display()))(std::io::Error::last_os_error()));
    }
    Ok(s.f_bavail as u64 * s.f_frsize as u64)
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename, fsync dir.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let ctx = || format!("write {}", tmp.display());
    let mut f = OpenOptions::new().create(true).write(true).truncate(true).open(&tmp).map_err(io(ctx()))?;
    f.write_all(bytes).map_err(io(ctx()))?;
    f.sync_all().map_err(io(ctx()))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(io(format!("rename to {}", path.display())))?;
    fsync_dir(path.parent().expect("files live in a directory"))
}

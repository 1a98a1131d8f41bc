//! The engine's view of `strata-fs`: the same durable file operations,
//! with failures as [`EngineError::Io`](crate::EngineError) naming what
//! was being done.

use crate::error::{Result, io};
use std::path::Path;
pub use strata_fs::{ZERO_STEP, zero_fill_ahead};

/// Makes a directory's entries (creations, renames, unlinks) durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    strata_fs::fsync_dir(dir).map_err(io(format!("fsync directory {}", dir.display())))
}

/// Bytes available to unprivileged writers on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> Result<u64> {
    strata_fs::free_bytes(path).map_err(io(format!("statvfs {}", path.display())))
}

/// Size of the filesystem holding `path`, in bytes.
pub fn total_bytes(path: &Path) -> Result<u64> {
    strata_fs::total_bytes(path).map_err(io(format!("statvfs {}", path.display())))
}

/// Writes `bytes` to `path` atomically: temp file, fsync, rename, fsync dir.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    strata_fs::replace_file(path, bytes).map_err(io(format!("replace {}", path.display())))
}

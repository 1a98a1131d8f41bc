//! Log segments: append-only files of records, read through one shared
//! mapping each so gets hand out zero-copy slices of the page cache.

use crate::error::{EngineError, Result, io};
use bytes::Bytes;
use memmap2::{Mmap, MmapOptions};
use std::fs::File;
use std::path::{Path, PathBuf};
use strata_format::headers::SEGMENT_HEADER_BYTES;
use strata_format::record::{self, DecodedRecord};
use strata_format::{FormatError, SegmentHeader};

/// File name of a log segment.
pub fn log_name(id: u64, generation: u32) -> String {
    format!("seg-{id:08}-g{generation:04}.log")
}

/// File name of an index file covering `[start, ..)` of a segment.
pub fn index_name(id: u64, generation: u32, start: u64) -> String {
    format!("seg-{id:08}-g{generation:04}-{start:012x}.idx")
}

/// Parses a file name written by [`log_name`] or [`index_name`] into
/// (segment id, generation, index start offset if an index file).
pub fn parse_name(name: &str) -> Option<(u64, u32, Option<u64>)> {
    let rest = name.strip_prefix("seg-")?;
    let (stem, ext) = rest.rsplit_once('.')?;
    let mut parts = stem.split('-');
    let id = parts.next()?.parse().ok()?;
    let generation = parts.next()?.strip_prefix('g')?.parse().ok()?;
    let start = parts.next().map(|s| u64::from_str_radix(s, 16));
    match (ext, start) {
        ("log", None) if parts.next().is_none() => Some((id, generation, None)),
        ("idx", Some(Ok(s))) if parts.next().is_none() => Some((id, generation, Some(s))),
        _ => None,
    }
}

/// One log segment file and its mapping. The mapping spans `map_len` bytes,
/// which may exceed the file (the active segment is mapped at its maximum
/// size once); only offsets below the durable length are ever read.
#[derive(Debug)]
pub struct Segment {
    /// Position in the log.
    pub id: u64,
    /// Compaction generation.
    pub generation: u32,
    /// Path of the file.
    pub path: PathBuf,
    map: Mmap,
    /// Kept open for `sendfile(2)` from this segment.
    file: File,
    /// The file opened with `O_DIRECT` for cold reads, on first use (`None`
    /// when the filesystem refuses it, as tmpfs does).
    direct: std::sync::OnceLock<Option<File>>,
}

impl Segment {
    /// Maps an existing segment file, checking its header.
    pub fn open(path: &Path, id: u64, generation: u32, map_len: u64) -> Result<Self> {
        let file = File::open(path).map_err(io(format!("open {}", path.display())))?;
        // SAFETY: segment files are only appended to by this process and never
        // truncated below a length that readers were told about; the mapping is
        // read-only. Other processes must not modify the data directory.
        let map = unsafe { MmapOptions::new().len(map_len as usize).map(&file) }.map_err(io(format!("mmap {}", path.display())))?;
        let len = file.metadata().map_err(io(format!("stat {}", path.display())))?.len();
        let seg = Self { id, generation, path: path.to_owned(), map, file, direct: std::sync::OnceLock::new() };
        if len < SEGMENT_HEADER_BYTES as u64 {
            return Err(seg.corrupt(0, FormatError::Truncated { what: "segment header", need: SEGMENT_HEADER_BYTES, have: len as usize }));
        }
        let h = SegmentHeader::decode(&seg.map[..SEGMENT_HEADER_BYTES]).map_err(|e| seg.corrupt(0, e))?;
        if h.segment_id != id || h.generation != generation {
            return Err(
                seg.corrupt(0, FormatError::Invalid { what: "segment header", detail: format!("names segment {} generation {}", h.segment_id, h.generation) })
            );
        }
        Ok(seg)
    }

    /// The file name, for errors.
    pub fn name(&self) -> String {
        self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    pub(crate) fn corrupt(&self, offset: u64, source: FormatError) -> EngineError {
        EngineError::Corrupt { file: self.name(), offset, source }
    }

    /// The mapped bytes `[start, start+len)`; the caller guarantees they are durable.
    pub fn slice(&self, start: u64, len: u64) -> &[u8] {
        &self.map[start as usize..(start + len) as usize]
    }

    /// Drops `[start, start+len)` from this process's mapping and from the
    /// page cache (the caller passes only durable ranges, so the pages are
    /// clean). Pages must leave the mapping first: the kernel keeps mapped
    /// pages cached. A later read faults them back in from the file.
    pub(crate) fn drop_cache(&self, start: u64, len: u64) {
        use std::os::fd::AsRawFd;
        let end = (start + len).min(self.map.len() as u64);
        if start < end {
            // SAFETY: the mapping is a read-only MAP_SHARED view of an
            // append-only file and this range is durable and never written
            // again, so after MADV_DONTNEED every byte reads back the same
            // from the file; slices held by readers stay valid (the range
            // stays mapped, only its pages are released).
            let r = unsafe { self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start as usize, (end - start) as usize) };
            if let Err(e) = r {
                tracing::debug!(file = %self.name(), error = %e, "madvise(DONTNEED) failed");
            }
        }
        // SAFETY: plain syscall on an fd this segment owns; no memory is passed.
        let rc = unsafe { libc::posix_fadvise(self.file.as_raw_fd(), start as libc::off_t, len as libc::off_t, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            tracing::debug!(file = %self.name(), rc, "posix_fadvise(DONTNEED) failed");
        }
    }

    /// Asks the kernel to read `[start, start+len)` in now, in one go: a
    /// record that left the page cache is then fetched with large reads
    /// instead of a fault and a small readahead at a time. Cheap when the
    /// pages are in memory.
    pub(crate) fn will_need(&self, start: u64, len: u64) {
        let end = (start + len).min(self.map.len() as u64);
        if start < end
            && let Err(e) = self.map.advise_range(memmap2::Advice::WillNeed, start as usize, (end - start) as usize)
        {
            tracing::debug!(file = %self.name(), error = %e, "madvise(WILLNEED) failed");
        }
    }

    /// Whether every page of `[start, start+len)` is in the page cache
    /// (`mincore(2)`; an error counts as resident, so the caller keeps to
    /// the mapping).
    pub(crate) fn resident(&self, start: u64, len: u64) -> bool {
        const PAGE: usize = crate::direct::ALIGN;
        let end = ((start + len) as usize).min(self.map.len());
        let from = start as usize / PAGE * PAGE;
        if from >= end {
            return true;
        }
        let mut pages = vec![0u8; (end - from).div_ceil(PAGE)];
        // SAFETY: `[from, end)` lies inside the mapping, whose base is
        // page-aligned, so the address is too; `pages` has a byte per page.
        let rc = unsafe { libc::mincore(self.map.as_ptr().add(from) as *mut libc::c_void, end - from, pages.as_mut_ptr()) };
        rc != 0 || pages.iter().all(|p| p & 1 == 1)
    }

    /// The segment opened with `O_DIRECT`, opened on first use; `None` on a
    /// filesystem that refuses it.
    fn direct_file(&self) -> Option<&File> {
        self.direct
            .get_or_init(|| {
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(&self.path)
                    .inspect_err(|e| tracing::debug!(file = %self.name(), error = %e, "no O_DIRECT here; cold reads go through the page cache"))
                    .ok()
            })
            .as_ref()
    }

    /// Reads `[start, start+len)` with `O_DIRECT` into a buffer of `pool`,
    /// bypassing the page cache. `None` when direct reads are not possible
    /// here (no free buffer, or a filesystem without `O_DIRECT`).
    pub(crate) fn read_direct(&self, pool: &std::sync::Arc<crate::direct::DirectReads>, start: u64, len: u64) -> Option<Result<Bytes>> {
        let file = self.direct_file()?;
        Some(pool.read(file, start, len as usize)?.map_err(io(format!("read {} at {start}", self.name()))))
    }

    /// Reads the record `[start, start+len)` with `O_DIRECT` into the tail
    /// cache under `key` (see [`crate::tail::TailCache::fill`]); `check` sees the
    /// record's bytes before any other reader can. `None` when that is not
    /// possible now (no room, no `O_DIRECT`, the record being filled).
    pub(crate) fn read_direct_into_tail(
        &self,
        tail: &std::sync::Arc<crate::tail::TailCache>,
        key: crate::tail::RecordAt,
        start: u64,
        len: u64,
        check: impl FnOnce(&[u8]) -> Result<()>,
    ) -> Option<Result<Bytes>> {
        use crate::direct::ALIGN;
        let file = self.direct_file()?;
        let aligned = start as usize / ALIGN * ALIGN;
        let (skip, len) = (start as usize - aligned, len as usize);
        let span = (skip + len).div_ceil(ALIGN) * ALIGN;
        tail.fill(key, span, skip, len, |buf| {
            crate::direct::read_aligned(file, aligned as u64, buf, skip + len).map_err(io(format!("read {} at {start}", self.name())))?;
            check(&buf[skip..skip + len])
        })
    }

    /// Decodes the record at `offset` of known length.
    pub fn record_at(&self, offset: u64, len: u32, verify_crc: bool) -> Result<DecodedRecord> {
        record::decode(self.slice(offset, len as u64), verify_crc).map_err(|e| self.corrupt(offset, e))
    }
}

/// Where a blob's bytes lie in a segment file, for `sendfile(2)`: holding it
/// keeps the file open, even if compaction unlinks it meanwhile.
#[derive(Debug, Clone)]
pub struct FileRange {
    seg: std::sync::Arc<Segment>,
    /// Byte offset in the file.
    pub offset: u64,
    /// Number of bytes.
    pub len: u64,
}

impl FileRange {
    pub(crate) fn new(seg: &std::sync::Arc<Segment>, offset: u64, len: u64) -> Self {
        Self { seg: seg.clone(), offset, len }
    }
    /// The open file descriptor of the segment (valid while `self` lives).
    pub fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.seg.file.as_raw_fd()
    }
}

/// A zero-copy view of part of a segment that keeps the mapping alive.
struct SegmentSlice {
    seg: std::sync::Arc<Segment>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for SegmentSlice {
    fn as_ref(&self) -> &[u8] {
        &self.seg.map[self.start..self.start + self.len]
    }
}

/// Bytes backed by the segment mapping: no copy into user space.
pub fn segment_bytes(seg: &std::sync::Arc<Segment>, start: u64, len: u64) -> Bytes {
    Bytes::from_owner(SegmentSlice { seg: seg.clone(), start: start as usize, len: len as usize })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse_name(&log_name(7, 2)), Some((7, 2, None)));
        assert_eq!(parse_name(&index_name(7, 2, 0x1234)), Some((7, 2, Some(0x1234))));
        assert_eq!(parse_name("seg-x-g1.log"), None);
        assert_eq!(parse_name("compaction.log"), None);
    }
}

//! Direct reads of cold records: a large record whose pages are not in the
//! page cache (it fell out of the write window, or the process restarted) is
//! read with `O_DIRECT` into a buffer from a small pool this store keeps,
//! instead of being faulted in through the segment's mapping.
//!
//! Why: faulting a cold record in allocates page-cache pages for it, and on
//! a VM that hands free memory back to its host every fresh page costs a
//! host fault (`python3 scripts/page-cost.py`: several times the CPU of the
//! copy itself), so a cold 64 MiB read cost more CPU than the disk needed
//! time. The pool's buffers are allocated once and reused, so after their
//! first use a direct read costs the disk's time and one copy to the
//! socket. It also keeps a scan over old blobs from pushing the recent
//! ones out of the page cache. Small records are always read through the
//! mapping: their pages are few and the kernel's cache suits them.

use bytes::Bytes;
use std::alloc::Layout;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// Alignment of offsets, lengths and buffers of `O_DIRECT` reads: the page
/// size, a multiple of every logical block size in use.
pub(crate) const ALIGN: usize = 4096;

/// Buffers are sized in steps of this, so a few sizes serve every record.
const STEP: usize = 1 << 20;

/// A pool of aligned read buffers, at most `limit` bytes in all.
#[derive(Debug)]
pub(crate) struct DirectReads {
    limit: usize,
    state: Mutex<Pool>,
}

#[derive(Debug, Default)]
struct Pool {
    free: Vec<AlignedBuf>,
    /// Bytes of every buffer allocated, free or lent out.
    total: usize,
}

impl DirectReads {
    /// A pool of up to `limit` bytes; 0 turns direct reads off.
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self { limit: limit as usize, state: Mutex::new(Pool::default()) })
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A buffer of at least `need` bytes, or `None` when the pool is lent
    /// out up to its limit (the caller reads through the mapping instead).
    fn take(&self, need: usize) -> Option<AlignedBuf> {
        let cap = need.div_ceil(STEP) * STEP;
        let mut p = self.pool();
        // The smallest free buffer that fits.
        if let Some(i) = (0..p.free.len()).filter(|&i| p.free[i].cap >= cap).min_by_key(|&i| p.free[i].cap) {
            return Some(p.free.swap_remove(i));
        }
        // Make room by freeing idle buffers that are too small.
        while p.total + cap > self.limit {
            let buf = p.free.pop()?;
            p.total -= buf.cap;
        }
        let buf = AlignedBuf::new(cap)?;
        p.total += cap;
        Some(buf)
    }

    fn give(&self, buf: AlignedBuf) {
        self.pool().free.push(buf);
    }

    /// Reads `[offset, offset + len)` of `file` (opened with `O_DIRECT`)
    /// into a pooled buffer. `None` when no buffer is free; an error when
    /// the read fails or the file ends first.
    pub fn read(self: &Arc<Self>, file: &File, offset: u64, len: usize) -> Option<std::io::Result<Bytes>> {
        let start = offset as usize / ALIGN * ALIGN;
        let skip = offset as usize - start;
        let span = (skip + len).div_ceil(ALIGN) * ALIGN;
        let mut buf = self.take(span)?;
        if let Err(e) = read_aligned(file, start as u64, &mut buf.as_mut()[..span], skip + len) {
            self.give(buf);
            return Some(Err(e));
        }
        Some(Ok(Bytes::from_owner(Lent { buf: Some(buf), pool: self.clone(), start: skip, len })))
    }
}

/// Fills `buf` (aligned, a whole number of [`ALIGN`] blocks) from `file`
/// (opened with `O_DIRECT`) at the aligned offset `start`, up to at least
/// its first `need` bytes; an error when the file ends first.
pub(crate) fn read_aligned(file: &File, start: u64, buf: &mut [u8], need: usize) -> std::io::Result<()> {
    let mut got = 0;
    while got < need {
        // Whole aligned blocks from an aligned position: what O_DIRECT needs.
        match file.read_at(&mut buf[got..], start + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        // A short read ends at the file's end, which need not be aligned:
        // the next read would start unaligned, so stop at whatever came.
        if got % ALIGN != 0 {
            break;
        }
    }
    if got < need {
        return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, format!("file ends before byte {}", start as usize + need)));
    }
    Ok(())
}

/// Heap memory aligned for `O_DIRECT`; never shared, freed on drop.
#[derive(Debug)]
struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
}

// SAFETY: the buffer owns its allocation exclusively; it is only reached
// through `&mut self` (to fill it) or `&self` (to read it once filled).
unsafe impl Send for AlignedBuf {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn layout(cap: usize) -> Option<Layout> {
        Layout::from_size_align(cap, ALIGN).ok()
    }

    fn new(cap: usize) -> Option<Self> {
        let layout = Self::layout(cap)?;
        // SAFETY: `layout` has a non-zero size (callers ask for at least STEP).
        let ptr = NonNull::new(unsafe { std::alloc::alloc(layout) })?;
        Some(Self { ptr, cap })
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `cap` bytes we own; u8 has no invalid
        // values, and the kernel or the copy writes them before they are read.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }

    fn as_slice(&self) -> &[u8] {
        // SAFETY: as in `as_mut`; shared access.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if let Some(layout) = Self::layout(self.cap) {
            // SAFETY: allocated in `new` with this very layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

/// A filled buffer lent out as `Bytes`; it goes back to the pool when the
/// last `Bytes` pointing into it is dropped.
struct Lent {
    buf: Option<AlignedBuf>,
    pool: Arc<DirectReads>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], |b| &b.as_slice()[self.start..self.start + self.len])
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            self.pool.give(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_reused_and_bounded() {
        let pool = DirectReads::new(3 * STEP as u64);
        let a = pool.take(10).unwrap();
        let b = pool.take(2 * STEP).unwrap();
        assert!(pool.take(1).is_none(), "the limit holds while buffers are lent out");
        let a_ptr = a.ptr;
        pool.give(a);
        let c = pool.take(STEP).unwrap();
        assert_eq!(c.ptr, a_ptr, "a free buffer that fits is reused");
        pool.give(c);
        pool.give(b);
        // A bigger request frees idle buffers to stay within the limit.
        let d = pool.take(3 * STEP).unwrap();
        assert_eq!(d.cap, 3 * STEP);
        assert_eq!(pool.pool().total, 3 * STEP);
    }

    #[test]
    fn reads_unaligned_ranges_and_returns_the_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..3 * ALIGN as u32 + 123).map(|i| (i * 7) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let pool = DirectReads::new(4 * STEP as u64);
        // Plain reads here (tmpfs refuses O_DIRECT); the alignment logic is the same.
        let f = File::open(&path).unwrap();
        let got = pool.read(&f, 5000, 7000).unwrap().unwrap();
        assert_eq!(&got[..], &data[5000..12000]);
        // Up to the file's unaligned end.
        let tail = pool.read(&f, 100, data.len() - 100).unwrap().unwrap();
        assert_eq!(&tail[..], &data[100..]);
        drop((got, tail));
        assert_eq!(pool.pool().free.len(), 2, "both buffers came back");
        assert!(pool.read(&f, 100, data.len()).unwrap().is_err(), "past the end is an error");
        assert_eq!(pool.pool().free.len(), 2, "a failed read gives its buffer back");
    }
}

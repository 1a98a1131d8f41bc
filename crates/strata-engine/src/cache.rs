//! Drop-behind for the page cache: a store keeps at most
//! [`EngineConfig::write_cache_bytes`](crate::EngineConfig) of recently
//! written log in the page cache. Once a range is durable and has fallen
//! out of that window, its writer drops it (`posix_fadvise(DONTNEED)`).
//!
//! Why: recent blobs are the hot ones (Ambry §2.2 serves them from the page
//! cache), older ones are read rarely, and a log written at disk speed would
//! otherwise fill all free memory with pages nobody reads. Keeping the
//! window bounded also means new writes reuse the pages just freed instead
//! of taking fresh ones; on a VM that hands free memory back to its host
//! (ballooning, free page reporting) a fresh page costs a host fault, and
//! measured here (`python3 scripts/page-cost.py`) writing through fresh
//! pages costs about ten times the system CPU of writing through
//! recycled ones.

use crate::EngineConfig;
use crate::direct::DirectReads;
use crate::segment::Segment;
use crate::tail::TailCache;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Drops happen in whole, aligned units of the largest page-cache folio.
const GRAIN: u64 = 2 << 20;

/// The window shared by every replica of a store, and the buffers its cold
/// reads use (`direct.rs`).
#[derive(Debug)]
pub(crate) struct WriteCache {
    /// Bytes of recent writes allowed to stay cached; 0 = no limit (the
    /// kernel decides alone).
    limit: u64,
    /// Bytes of recent writes currently counted against the limit.
    used: AtomicU64,
    /// Buffers for direct reads of records outside the page cache.
    pub direct: Arc<DirectReads>,
    /// Memory for direct writes of large records and reads of recent ones.
    pub tail: Option<Arc<TailCache>>,
}

impl WriteCache {
    pub fn new(config: &EngineConfig) -> Arc<Self> {
        let tail = TailCache::new(config.tail_cache_bytes, config.tail_cache_prefault);
        Arc::new(Self { limit: config.write_cache_bytes, used: AtomicU64::new(0), direct: DirectReads::new(config.cold_read_buffer_bytes), tail })
    }
}

/// One writer's recently written ranges, oldest first. Each writer drops
/// only its own ranges: a busy partition pays for its own writes.
pub(crate) struct Recent {
    cache: Arc<WriteCache>,
    ranges: VecDeque<Range>,
    held: u64,
}

struct Range {
    /// Weak: a segment compacted away is not kept open by the window.
    seg: Weak<Segment>,
    seg_id: u64,
    start: u64,
    end: u64,
}

impl Recent {
    pub fn new(cache: Arc<WriteCache>) -> Self {
        Self { cache, ranges: VecDeque::new(), held: 0 }
    }

    /// Records `[start, end)` of `seg` as written and durable, then drops
    /// the oldest ranges while the store is over its window. Returns the
    /// bytes dropped.
    pub fn wrote(&mut self, seg: &Arc<Segment>, start: u64, end: u64) -> u64 {
        if self.cache.limit == 0 || end <= start {
            return 0;
        }
        let len = end - start;
        match self.ranges.back_mut() {
            Some(r) if r.seg_id == seg.id && r.end == start => r.end = end,
            _ => self.ranges.push_back(Range { seg: Arc::downgrade(seg), seg_id: seg.id, start, end }),
        }
        self.held += len;
        let used = self.cache.used.fetch_add(len, Ordering::Relaxed) + len;
        let mut over = used.saturating_sub(self.cache.limit);
        let mut dropped = 0;
        while over > 0 {
            let more_after = self.ranges.len() > 1;
            let Some(r) = self.ranges.front_mut() else { break };
            // The page cache holds large folios (up to 2 MiB, naturally
            // aligned) and drops only folios wholly inside the range, so
            // drops start and end on GRAIN boundaries: a range's tail is
            // dropped only once its segment is sealed (a later range
            // exists), when no folio can grow past it.
            let target = r.start + (r.end - r.start).min(over);
            let mut cut = target.div_ceil(GRAIN) * GRAIN;
            if cut >= r.end {
                cut = if more_after { r.end } else { r.end / GRAIN * GRAIN };
            }
            if cut <= r.start {
                break;
            }
            let n = cut - r.start;
            if let Some(seg) = r.seg.upgrade() {
                // From the grain boundary: what lies before r.start in this
                // segment is durable and was dropped already or never counted.
                let from = r.start / GRAIN * GRAIN;
                seg.drop_cache(from, cut - from);
            }
            r.start = cut;
            if r.start >= r.end {
                self.ranges.pop_front();
            }
            self.held -= n;
            self.cache.used.fetch_sub(n, Ordering::Relaxed);
            over = over.saturating_sub(n);
            dropped += n;
        }
        dropped
    }
}

impl Drop for Recent {
    fn drop(&mut self) {
        self.cache.used.fetch_sub(self.held, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::log_name;
    use crate::writer::create_segment_file;
    use std::io::Write;
    use strata_format::SegmentHeader;
    use strata_format::headers::SEGMENT_HEADER_BYTES;

    const PAGE: u64 = 4096;
    const MIB: u64 = 1 << 20;

    fn window(bytes: u64) -> crate::EngineConfig {
        crate::EngineConfig { write_cache_bytes: bytes, cold_read_buffer_bytes: 0, tail_cache_bytes: 0, ..Default::default() }
    }

    /// Which of the segment's pages in `[start, end)` are in memory.
    fn resident(seg: &Segment, start: u64, end: u64) -> Vec<bool> {
        let s = seg.slice(start, end - start);
        let mut v = vec![0u8; s.len().div_ceil(PAGE as usize)];
        // SAFETY: `s` is mapped and starts on a page (callers pass page
        // multiples; the mapping is page-aligned); `v` has a byte per page.
        let rc = unsafe { libc::mincore(s.as_ptr() as *mut libc::c_void, s.len(), v.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        v.iter().map(|b| b & 1 == 1).collect()
    }

    fn on_tmpfs(dir: &std::path::Path) -> bool {
        let c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
        // SAFETY: statfs fills a zeroed struct from a valid C string path.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
        st.f_type == libc::TMPFS_MAGIC
    }

    #[test]
    fn drops_the_oldest_ranges_past_the_window_and_keeps_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(log_name(0, 0));
        let header = SegmentHeader { partition: 1, segment_id: 0, generation: 0, incarnation: [7; 16] };
        let mut f = create_segment_file(&path, &header).unwrap();
        let data: Vec<u8> = (0..12 * MIB).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        f.sync_data().unwrap();
        let seg = Arc::new(Segment::open(&path, 0, 0, 16 * MIB).unwrap());
        let h = SEGMENT_HEADER_BYTES as u64;
        // Read every page through the mapping, as GETs would.
        assert_eq!(seg.slice(h, 12 * MIB), &data[..]);

        let cache = WriteCache::new(&window(4 * MIB));
        let mut recent = Recent::new(cache.clone());
        let used = || cache.used.load(Ordering::Relaxed);
        assert_eq!(recent.wrote(&seg, h, h + 4 * MIB), 0, "within the window");
        // Over by 4 MiB: drops up to the next 2 MiB boundary past that.
        assert_eq!(recent.wrote(&seg, h + 4 * MIB, h + 8 * MIB), 6 * MIB - h);
        assert!(used() <= 4 * MIB, "{}", used());
        assert_eq!(recent.wrote(&seg, h + 8 * MIB, h + 12 * MIB), 4 * MIB);
        assert!(used() <= 4 * MIB, "{}", used());
        assert_eq!(recent.held, used());

        if !on_tmpfs(dir.path()) {
            // (tmpfs keeps its files in the page cache: nothing to drop.)
            assert!(resident(&seg, 0, 10 * MIB).iter().all(|r| !r), "dropped pages are still in memory");
            assert!(resident(&seg, 10 * MIB, 12 * MIB).iter().all(|r| *r), "pages in the window were dropped");
        }
        // Every byte still reads back, from the file.
        assert_eq!(seg.slice(h, 12 * MIB), &data[..]);

        // A writer that goes away gives back what it held.
        drop(recent);
        assert_eq!(used(), 0);
    }

    #[test]
    fn a_sealed_segment_is_dropped_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let header = |id| SegmentHeader { partition: 1, segment_id: id, generation: 0, incarnation: [7; 16] };
        let mut segs = Vec::new();
        for id in 0..2 {
            let path = dir.path().join(log_name(id, 0));
            let mut f = create_segment_file(&path, &header(id)).unwrap();
            f.write_all(&vec![id as u8; 3 * MIB as usize]).unwrap();
            segs.push(Arc::new(Segment::open(&path, id, 0, 4 * MIB).unwrap()));
        }
        let h = SEGMENT_HEADER_BYTES as u64;
        let cache = WriteCache::new(&window(MIB));
        let mut recent = Recent::new(cache.clone());
        // The active segment's unaligned tail stays until it is sealed...
        assert_eq!(recent.wrote(&segs[0], h, h + 3 * MIB), 2 * MIB - h);
        // ...and goes once the writer has moved to the next segment.
        // Segment 0's last 1 MiB + h, then segment 1 up to its last whole grain.
        assert_eq!(recent.wrote(&segs[1], h, h + 3 * MIB), 3 * MIB);
        assert!(recent.ranges.iter().all(|r| r.seg_id == 1));
        // Over the window by less than a grain: the unaligned tail waits.
        assert_eq!(cache.used.load(Ordering::Relaxed), MIB + h);
    }

    #[test]
    fn no_limit_drops_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(log_name(0, 0));
        let header = SegmentHeader { partition: 1, segment_id: 0, generation: 0, incarnation: [7; 16] };
        let mut f = create_segment_file(&path, &header).unwrap();
        f.write_all(&[1u8; 8192]).unwrap();
        let seg = Arc::new(Segment::open(&path, 0, 0, 1 << 20).unwrap());
        let mut recent = Recent::new(WriteCache::new(&window(0)));
        assert_eq!(recent.wrote(&seg, 64, 8192), 0);
        assert!(recent.ranges.is_empty());
    }
}

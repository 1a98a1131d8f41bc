//! The tail cache: memory this store allocates once, through which large
//! writes go to the log with `O_DIRECT`, and from which reads of those
//! recent records are served.
//!
//! Why: a buffered write puts every byte in a page-cache page, and the page
//! cache takes fresh pages from the kernel. On a VM that hands free memory
//! back to its host (free page reporting, ballooning) each fresh page costs
//! a host fault (`python3 scripts/page-cost.py`: about ten times the system
//! CPU of writing through a page already in use), and the window of
//! `cache.rs` cannot make the kernel hand back the pages it dropped before
//! they are reported. This memory is mapped once, faulted in by a
//! background thread that runs only when a CPU is idle (the ring uses the
//! part already faulted in meanwhile), and then reused forever: a large
//! write costs one copy into it and the disk's time, and the blobs written
//! last, the ones read most (Ambry §2.2), are read from it without a
//! syscall. It is the same bargain TigerBeetle makes with its static
//! allocation.
//!
//! Layout: a ring of [`REGION`]-sized regions with one allocation pointer.
//! Each write group takes the next aligned range (wrapping at the end). A
//! region's old records are forgotten when the pointer enters it; a region
//! that a reader (or a writer still copying) holds a lease on is skipped,
//! so a slow client never blocks a write, and when everything is leased
//! the write goes through the page cache as before. Records are keyed by
//! where they lie in the log (partition, segment, generation, offset), so a
//! compaction or a failed write can never make a key name other bytes.

use bytes::Bytes;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Alignment of positions in the ring: what `O_DIRECT` needs of buffers.
pub(crate) const ALIGN: usize = crate::direct::ALIGN;

/// Unit of leasing and forgetting.
pub(crate) const REGION: usize = 16 << 20;

/// The prefault thread touches one byte in every page of this size: the
/// smallest page, so each page is faulted in whatever huge pages give.
const PAGE: usize = 4096;

/// Where a record lies in the log: partition, segment id, generation, offset.
pub(crate) type RecordAt = (u64, u64, u32, u64);

/// See the module documentation.
pub(crate) struct TailCache {
    /// Keeps the mapping alive; only ever accessed through `base`.
    _map: memmap2::MmapMut,
    base: NonNull<u8>,
    len: usize,
    /// Readers and writers holding bytes of each region.
    leases: Vec<AtomicU32>,
    /// Bytes at the start of the mapping that are faulted in and that the
    /// ring uses (whole regions): `len`, or while the prefault thread runs,
    /// what it has finished. Only that thread touches the bytes past it.
    ready: AtomicUsize,
    state: Mutex<Ring>,
}

// SAFETY: the mapping is only reached through `base`; every byte range is
// written by one writer while it holds an `Alloc` (which no reader can see
// until `publish`, under the mutex), and only read after that.
unsafe impl Send for TailCache {}
// SAFETY: as above.
unsafe impl Sync for TailCache {}

impl std::fmt::Debug for TailCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TailCache").field("len", &self.len).finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Ring {
    /// Next free position (aligned).
    next: usize,
    /// Published records: position and length in the ring.
    entries: HashMap<RecordAt, (usize, usize)>,
    /// The records touching each region, forgotten when it is reused.
    region_keys: Vec<Vec<RecordAt>>,
    /// Records a reader is reading into the ring now (see [`TailCache::fill`]).
    filling: HashSet<RecordAt>,
    /// Records read from the disk once lately, oldest first: the second
    /// miss fills the ring (see [`TailCache::fill`]).
    missed: HashSet<RecordAt>,
    missed_order: VecDeque<RecordAt>,
}

/// How many once-missed records the ring remembers.
const MISSED_MAX: usize = 4096;

/// Counts of the cache's work, for the metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TailStats {
    /// Bytes of the ring.
    pub capacity: u64,
    /// Records the ring holds now.
    pub records: u64,
    /// Bytes faulted in and in use: grows to `capacity` after start.
    pub ready: u64,
}

/// A node's stores add up field by field (the metrics report their sum).
impl std::ops::Add for TailStats {
    type Output = Self;

    fn add(self, o: Self) -> Self {
        Self { capacity: self.capacity + o.capacity, records: self.records + o.records, ready: self.ready + o.ready }
    }
}

impl TailCache {
    /// A ring of `bytes` (rounded down to whole regions); `None` for less
    /// than one region or when the memory cannot be mapped. With `prefault`,
    /// the first region is faulted in now (a few milliseconds), so the ring
    /// takes large writes from the first one, and a background thread
    /// faults in the rest while the ring grows into it region by region
    /// (see [`Self::prefault_in_background`]); without, every region is used
    /// at once and its pages fault on first write.
    pub fn new(bytes: u64, prefault: bool) -> Option<Arc<Self>> {
        let cache = Self::map(bytes, prefault)?;
        if prefault && cache.prefault_region() {
            cache.prefault_in_background();
        }
        Some(cache)
    }

    /// The mapping; with `prefault`, none of it is ready yet.
    fn map(bytes: u64, prefault: bool) -> Option<Arc<Self>> {
        let regions = (bytes as usize) / REGION;
        if regions == 0 {
            return None;
        }
        let len = regions * REGION;
        let mut map = memmap2::MmapOptions::new()
            .len(len)
            .map_anon()
            .inspect_err(|e| tracing::warn!(bytes = len, error = %e, "cannot map the tail cache; large writes go through the page cache"))
            .ok()?;
        // Fewer TLB misses on copies; ignored where huge pages are off.
        let _ = map.advise(memmap2::Advice::HugePage);
        let base = NonNull::new(map.as_mut_ptr())?;
        let ring = Ring { region_keys: vec![Vec::new(); regions], ..Ring::default() };
        let leases = (0..regions).map(|_| AtomicU32::new(0)).collect();
        let ready = AtomicUsize::new(if prefault { 0 } else { len });
        Some(Arc::new(Self { _map: map, base, len, leases, ready, state: Mutex::new(ring) }))
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Faults the ring in on a background thread at `SCHED_IDLE`, so it
    /// only takes a CPU nothing else wants: faulting the default 3 GiB costs
    /// about 6.5 s of CPU on a VM (each fresh page is a host fault), and at
    /// normal priority it took a core from requests for that long (small
    /// PUTs ran at a quarter of their rate). It touches pages instead of
    /// calling `MADV_POPULATE_WRITE`: populating holds the process's
    /// memory-map lock, so a thread preempted there made every thread that
    /// maps memory wait (puts stalled for a second), while a fault on a
    /// touched page takes only this mapping's own lock (per-VMA locking),
    /// which nothing else takes for writing while the store runs.
    fn prefault_in_background(self: &Arc<Self>) {
        let weak: Weak<Self> = Arc::downgrade(self);
        let spawned = std::thread::Builder::new().name("strata-tail-prefault".into()).spawn(move || {
            run_when_idle();
            while let Some(cache) = weak.upgrade() {
                if !cache.prefault_region() {
                    break;
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the tail cache's prefault thread; the ring uses its memory at once");
            self.ready.store(self.len, Ordering::Release);
        }
    }

    /// Faults in the region just past the ready prefix and adds it to the
    /// ring; `false` when the whole ring is ready. One thread at a time
    /// calls this (`new` for the first region, then the prefault thread),
    /// and nothing else reaches bytes past the prefix.
    fn prefault_region(&self) -> bool {
        let at = self.ready.load(Ordering::Acquire);
        if at >= self.len {
            return false;
        }
        for page in (at..at + REGION).step_by(PAGE) {
            // SAFETY: the byte lies inside the mapping (`at + REGION <= len`,
            // both whole regions) and past the ready prefix, which is all
            // `alloc` hands out, so no other thread reads or writes it. The
            // mapping is fresh anonymous memory: writing 0 changes nothing.
            unsafe { self.base.as_ptr().add(page).write_volatile(0) };
        }
        self.ready.store(at + REGION, Ordering::Release);
        true
    }

    fn regions(pos: usize, len: usize) -> std::ops::RangeInclusive<usize> {
        pos / REGION..=(pos + len.max(1) - 1) / REGION
    }

    /// Takes the next `len` bytes of the ring (rounded up to [`ALIGN`]) for
    /// one writer, forgetting what the regions it enters held. `None` when
    /// `len` exceeds the ring or every region it could use is leased.
    pub fn alloc(&self, len: usize) -> Option<Alloc<'_>> {
        let n = len.div_ceil(ALIGN) * ALIGN;
        // While the prefault thread runs, the ring wraps within what it has
        // faulted in.
        let ready = self.ready.load(Ordering::Acquire);
        if n == 0 || n > ready {
            return None;
        }
        let mut ring = self.ring();
        for _ in 0..=self.leases.len() + 1 {
            let p = if ring.next + n > ready { 0 } else { ring.next };
            // The region holding `p` was entered already unless `p` starts it.
            let fresh = p.div_ceil(REGION)..=(p + n - 1) / REGION;
            if let Some(busy) = fresh.clone().find(|&r| self.leases[r].load(Ordering::Acquire) != 0) {
                ring.next = (busy + 1) * REGION;
                continue;
            }
            for r in fresh {
                for k in std::mem::take(&mut ring.region_keys[r]) {
                    ring.entries.remove(&k);
                }
            }
            for r in Self::regions(p, n) {
                self.leases[r].fetch_add(1, Ordering::AcqRel);
            }
            ring.next = p + n;
            return Some(Alloc { cache: self, pos: p, len: n });
        }
        None
    }

    /// Makes records written into `alloc` readable: each is `(where it lies
    /// in the log, offset in the allocation, length)`.
    pub fn publish(&self, alloc: Alloc<'_>, records: &[(RecordAt, usize, usize)]) {
        let mut ring = self.ring();
        for &(key, off, len) in records {
            if off + len > alloc.len {
                continue;
            }
            let pos = alloc.pos + off;
            ring.entries.insert(key, (pos, len));
            for r in Self::regions(pos, len) {
                ring.region_keys[r].push(key);
            }
        }
    }

    /// Reads a record the ring does not hold into it, so the next reads of
    /// it are served from memory: the records read most are the recent and
    /// the popular ones (Ambry §2.2), and a cold record read twice is
    /// likely read again. Only a record missed before is taken in, so one
    /// pass over old blobs (a scan, a replica catching up) does not push
    /// the recent ones out. `read` fills the `span` bytes given to it from
    /// the disk and checks them (once published they are served unchecked,
    /// like the bytes this store wrote); the record is `[skip, skip + len)`
    /// of them. `None`, without calling `read`, on a first miss, when the
    /// ring has no free room, or while another reader fills the same
    /// record: the caller reads it some other way.
    pub fn fill<E>(
        self: &Arc<Self>,
        key: RecordAt,
        span: usize,
        skip: usize,
        len: usize,
        read: impl FnOnce(&mut [u8]) -> Result<(), E>,
    ) -> Option<Result<Bytes, E>> {
        if len == 0 || skip + len > span {
            return None;
        }
        {
            let mut ring = self.ring();
            if !ring.missed.remove(&key) {
                ring.missed.insert(key);
                ring.missed_order.push_back(key);
                while ring.missed_order.len() > MISSED_MAX {
                    if let Some(old) = ring.missed_order.pop_front() {
                        ring.missed.remove(&old);
                    }
                }
                return None;
            }
            if !ring.filling.insert(key) {
                return None;
            }
        }
        // Whatever happens below, the record is no longer being filled after.
        struct Filling<'a>(&'a TailCache, RecordAt);
        impl Drop for Filling<'_> {
            fn drop(&mut self) {
                self.0.ring().filling.remove(&self.1);
            }
        }
        let _filling = Filling(self, key);
        let mut alloc = self.alloc(span)?;
        if let Err(e) = read(&mut alloc.buf()[..span]) {
            return Some(Err(e));
        }
        let pos = alloc.pos + skip;
        // The reader's lease is taken before the writer's goes.
        for r in Self::regions(pos, len) {
            self.leases[r].fetch_add(1, Ordering::AcqRel);
        }
        self.publish(alloc, &[(key, skip, len)]);
        Some(Ok(Bytes::from_owner(Lease { cache: self.clone(), pos, len })))
    }

    /// The record at `key`, if the ring still holds it: a view that keeps
    /// its regions from being reused until dropped.
    pub fn get(self: &Arc<Self>, key: &RecordAt) -> Option<Bytes> {
        let ring = self.ring();
        let &(pos, len) = ring.entries.get(key)?;
        for r in Self::regions(pos, len) {
            self.leases[r].fetch_add(1, Ordering::AcqRel);
        }
        drop(ring);
        Some(Bytes::from_owner(Lease { cache: self.clone(), pos, len }))
    }

    /// Size and occupancy, for the metrics.
    pub fn stats(&self) -> TailStats {
        TailStats { capacity: self.len as u64, records: self.ring().entries.len() as u64, ready: self.ready.load(Ordering::Relaxed) as u64 }
    }

    fn release(&self, pos: usize, len: usize) {
        for r in Self::regions(pos, len) {
            self.leases[r].fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Lowers the calling thread to `SCHED_IDLE`: it runs only on a CPU that
/// nothing else wants. Best effort: where that is refused it keeps its
/// priority.
fn run_when_idle() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 names the calling thread; `param` outlives the call.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "cannot lower the tail cache's prefault thread to SCHED_IDLE");
    }
}

/// A writer's range of the ring; its regions stay leased until dropped.
pub(crate) struct Alloc<'a> {
    cache: &'a TailCache,
    pos: usize,
    len: usize,
}

impl Alloc<'_> {
    /// The range's memory, for the writer alone.
    pub fn buf(&mut self) -> &mut [u8] {
        // SAFETY: `[pos, pos+len)` lies in the mapping and was handed to this
        // allocation only; no reader sees it before `publish`, and the
        // regions cannot be reallocated while this lease is held.
        unsafe { std::slice::from_raw_parts_mut(self.cache.base.as_ptr().add(self.pos), self.len) }
    }
}

impl Drop for Alloc<'_> {
    fn drop(&mut self) {
        self.cache.release(self.pos, self.len);
    }
}

/// A reader's view of a published record.
struct Lease {
    cache: Arc<TailCache>,
    pos: usize,
    len: usize,
}

impl AsRef<[u8]> for Lease {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: published bytes are never written again while leased.
        unsafe { std::slice::from_raw_parts(self.cache.base.as_ptr().add(self.pos), self.len) }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.cache.release(self.pos, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(off: u64) -> RecordAt {
        (1, 1, 0, off)
    }

    fn put(c: &TailCache, at: RecordAt, fill: u8, len: usize) -> Option<usize> {
        let mut a = c.alloc(len)?;
        a.buf()[..len].fill(fill);
        let pos = a.pos;
        c.publish(a, &[(at, 0, len)]);
        Some(pos)
    }

    #[test]
    fn records_read_back_until_their_region_is_reused() {
        let c = TailCache::new(3 * REGION as u64, false).unwrap();
        let mib = 1 << 20;
        for i in 0..40u64 {
            put(&c, key(i), i as u8, mib).unwrap();
        }
        // 40 MiB through a 48 MiB ring: everything is still there.
        for i in 0..40u64 {
            let b = c.get(&key(i)).unwrap();
            assert_eq!(b.len(), mib);
            assert!(b.iter().all(|&x| x == i as u8), "record {i}");
        }
        // 9 more wrap into region 0: its 16 records are forgotten, the rest stay.
        for i in 40..49u64 {
            put(&c, key(i), i as u8, mib).unwrap();
        }
        assert!((0..16).all(|i| c.get(&key(i)).is_none()));
        for i in 16..49u64 {
            assert!(c.get(&key(i)).unwrap().iter().all(|&x| x == i as u8), "record {i}");
        }
        assert_eq!(c.stats().records, 33);
    }

    #[test]
    fn a_leased_region_is_skipped_not_overwritten() {
        let c = TailCache::new(2 * REGION as u64, false).unwrap();
        let half = REGION / 2;
        put(&c, key(0), 7, half).unwrap();
        put(&c, key(1), 8, half).unwrap();
        let held = c.get(&key(0)).unwrap();
        assert_eq!(put(&c, key(2), 9, REGION), Some(REGION));
        // Would wrap into region 0, which a reader holds: region 1 is reused.
        assert_eq!(put(&c, key(3), 10, half), Some(REGION));
        assert!(c.get(&key(2)).is_none());
        assert!(held.iter().all(|&x| x == 7));
        assert!(c.get(&key(1)).unwrap().iter().all(|&x| x == 8));
        // A writer's own allocation is a lease too.
        let w = c.alloc(half).unwrap();
        assert!(c.alloc(half).is_none(), "region 0 is read, region 1 is being written");
        drop(w);
        drop(held);
        // Now region 0 is free again and the pointer wraps into it.
        assert_eq!(put(&c, key(4), 11, half), Some(0));
        assert!(c.get(&key(0)).is_none() && c.get(&key(1)).is_none());
        assert!(c.get(&key(3)).unwrap().iter().all(|&x| x == 10));
    }

    #[test]
    fn a_record_spanning_regions_is_leased_whole() {
        let c = TailCache::new(3 * REGION as u64, false).unwrap();
        put(&c, key(0), 1, REGION / 2).unwrap();
        // Spans regions 0 and 1.
        put(&c, key(1), 2, REGION).unwrap();
        let held = c.get(&key(1)).unwrap();
        put(&c, key(2), 3, REGION).unwrap();
        // Regions 0 and 1 are leased through key 1: the next range is region 2.
        assert_eq!(put(&c, key(3), 4, REGION), Some(2 * REGION));
        assert!(held.iter().all(|&x| x == 2));
        assert!(c.get(&key(1)).is_some() && c.get(&key(0)).is_some());
        assert!(c.get(&key(2)).is_none());
    }

    #[test]
    fn a_record_missed_twice_is_read_into_the_ring() {
        let c = TailCache::new(2 * REGION as u64, false).unwrap();
        let read = |b: &mut [u8]| {
            b.fill(5);
            b[100] = 6;
            Ok::<_, String>(())
        };
        assert!(c.fill(key(1), 2 * ALIGN, 100, 4000, |_| -> Result<(), String> { panic!("a first miss reads nothing in") }).is_none());
        let got = c.fill(key(1), 2 * ALIGN, 100, 4000, read).unwrap().unwrap();
        assert_eq!(got.len(), 4000);
        assert_eq!(got[0], 6, "the record starts `skip` bytes into the span");
        assert!(got[1..].iter().all(|&x| x == 5));
        assert_eq!(&c.get(&key(1)).unwrap()[..], &got[..], "later reads find it");
        // A failed read or check publishes nothing, and the next miss starts over.
        assert!(c.fill(key(2), ALIGN, 0, 10, |_| -> Result<(), String> { panic!("first miss") }).is_none());
        assert_eq!(c.fill(key(2), ALIGN, 0, 10, |_| Err("bad crc".to_owned())).unwrap().unwrap_err(), "bad crc");
        assert!(c.get(&key(2)).is_none());
        assert!(c.fill(key(2), ALIGN, 0, 10, |_| -> Result<(), String> { panic!("first miss again") }).is_none());
        // Two readers never fill the same record at once.
        let c2 = c.clone();
        assert!(
            c.fill(key(2), ALIGN, 0, 10, |_| {
                assert!(c2.fill(key(2), ALIGN, 0, 10, |_| -> Result<(), String> { panic!("a miss while filling") }).is_none());
                assert!(c2.fill(key(2), ALIGN, 0, 10, |_| -> Result<(), String> { panic!("being filled") }).is_none());
                Ok::<_, String>(())
            })
            .is_some()
        );
        // Spans that cannot hold the record are refused.
        assert!(c.fill(key(3), ALIGN, 100, ALIGN, read).is_none());
    }

    #[test]
    fn the_ring_grows_into_what_is_faulted_in() {
        // No thread: the test faults regions in itself.
        let c = TailCache::map(3 * REGION as u64, true).unwrap();
        assert_eq!(c.stats().ready, 0);
        assert!(c.alloc(ALIGN).is_none(), "nothing is ready");
        assert!(c.prefault_region());
        assert_eq!(c.stats().ready, REGION as u64);
        assert!(c.alloc(REGION + ALIGN).is_none(), "bigger than what is ready");
        let mib = 1 << 20;
        // 20 records of 1 MiB wrap within region 0: the first ones are forgotten.
        for i in 0..20u64 {
            assert!(put(&c, key(i), i as u8, mib).unwrap() < REGION, "record {i} lies in the ready region");
        }
        assert!(c.get(&key(0)).is_none());
        assert!(c.get(&key(19)).unwrap().iter().all(|&x| x == 19));
        // Records 16-19 wrapped to the start of region 0. Once region 1 is
        // ready, the pointer runs on from there into it instead of wrapping.
        assert!(c.prefault_region());
        assert_eq!(put(&c, key(20), 20, REGION).unwrap(), 4 * mib);
        assert!(c.get(&key(19)).unwrap().iter().all(|&x| x == 19), "region 0 was not reused");
        assert!(c.prefault_region());
        assert!(!c.prefault_region(), "all three regions are ready");
        assert_eq!(c.stats().ready, c.stats().capacity);
        assert_eq!(put(&c, key(21), 21, REGION).unwrap(), 4 * mib + REGION);
    }

    #[test]
    fn the_prefault_thread_readies_the_whole_ring() {
        let c = TailCache::new(4 * REGION as u64, true).unwrap();
        assert!(c.stats().ready >= REGION as u64, "the first region is ready on return");
        assert_eq!(put(&c, key(0), 9, REGION).unwrap(), 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while c.stats().ready < c.stats().capacity {
            assert!(std::time::Instant::now() < deadline, "prefault stuck at {} bytes", c.stats().ready);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(put(&c, key(1), 1, 2 * REGION).unwrap(), REGION, "the pointer runs on into the faulted regions");
    }

    #[test]
    fn too_small_or_too_big() {
        assert!(TailCache::new(REGION as u64 - 1, false).is_none());
        let c = TailCache::new(REGION as u64, false).unwrap();
        assert!(c.alloc(REGION + 1).is_none());
        assert!(c.alloc(0).is_none());
        let mut a = c.alloc(1).unwrap();
        assert_eq!(a.buf().len(), ALIGN);
    }
}

//! Multi-buffer MD5: the ETags of concurrent uploads hashed sixteen at a
//! time, one stream per 32-bit lane of an AVX-512 register.
//!
//! MD5 is one long dependency chain, so a single stream runs at under
//! 1 GB/s on this machine's cores ([`Single`]; `openssl speed -evp md5`)
//! whatever the vector width; with 16 uploads in flight, hashing them one by one took
//! 33–44% of the server's CPU (perf, `strata bench s3` at 1 MiB and 64 MiB
//! with 16 clients). Sixteen independent streams fill the sixteen lanes of
//! one register instead (as MinIO's md5-simd does). One thread owns every
//! stream's state: uploads send it their body frames, it hashes one block
//! of every stream that has one per kernel step, and a stream alone still
//! goes through the same kernel, one lane in use.
//!
//! Without AVX-512 ([`pool`] is `None`) callers hash with the `md-5` crate.

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use tokio::sync::{Semaphore, oneshot};

/// Bytes a stream may have queued at the hasher before its sender waits.
const QUEUED_BYTES_MAX: usize = 8 << 20;
/// Blocks hashed per stream between looks at the message queue.
const RUN_BLOCKS_MAX: usize = 256;

enum Msg {
    Open(u64, Arc<Semaphore>),
    Data(u64, Bytes, u32),
    Finish(u64, oneshot::Sender<[u8; 16]>),
    Close(u64),
}

/// The hashing thread's handle.
pub(crate) struct Pool {
    tx: mpsc::Sender<Msg>,
    next: AtomicU64,
}

/// The process's pool, started on first use; `None` without AVX-512.
pub(crate) fn pool() -> Option<&'static Pool> {
    static POOL: OnceLock<Option<Pool>> = OnceLock::new();
    POOL.get_or_init(|| {
        if !kernel::available() {
            return None;
        }
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new().name("strata-md5".into()).spawn(move || run(rx)).ok()?;
        Some(Pool { tx, next: AtomicU64::new(1) })
    })
    .as_ref()
}

impl Pool {
    fn send(&self, m: Msg) {
        // The thread only ends with the process.
        let _ = self.tx.send(m);
    }

    /// A new stream to hash.
    pub fn stream(&'static self) -> Stream {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let sem = Arc::new(Semaphore::new(QUEUED_BYTES_MAX));
        self.send(Msg::Open(id, sem.clone()));
        Stream { inner: Arc::new(StreamInner { pool: self, id, sem, finished: AtomicBool::new(false) }) }
    }
}

/// One stream being hashed; cheap to clone. Dropped unfinished, it is
/// discarded.
#[derive(Clone)]
pub(crate) struct Stream {
    inner: Arc<StreamInner>,
}

struct StreamInner {
    pool: &'static Pool,
    id: u64,
    sem: Arc<Semaphore>,
    finished: AtomicBool,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if !self.finished.load(Ordering::Relaxed) {
            self.pool.send(Msg::Close(self.id));
        }
    }
}

impl Stream {
    /// Appends bytes; waits while too many of this stream's bytes are queued.
    pub async fn update(&self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        let permits = b.len().min(QUEUED_BYTES_MAX) as u32;
        // The semaphore is never closed.
        if let Ok(p) = self.inner.sem.acquire_many(permits).await {
            p.forget();
        }
        self.inner.pool.send(Msg::Data(self.inner.id, b, permits));
    }

    /// The MD5 of everything appended.
    pub async fn finish(self) -> Option<[u8; 16]> {
        let (tx, rx) = oneshot::channel();
        self.inner.finished.store(true, Ordering::Relaxed);
        self.inner.pool.send(Msg::Finish(self.inner.id, tx));
        rx.await.ok()
    }
}

/// A stream's state at the hashing thread.
struct Lane {
    state: [u32; 4],
    /// Frames not yet hashed, with the permits each took; the front one
    /// is hashed from `off` on.
    queue: VecDeque<(Bytes, u32)>,
    off: usize,
    queued: usize,
    len: u64,
    sem: Arc<Semaphore>,
    done: Option<oneshot::Sender<[u8; 16]>>,
}

const INIT: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

impl Lane {
    fn new(sem: Arc<Semaphore>) -> Self {
        Self { state: INIT, queue: VecDeque::new(), off: 0, queued: 0, len: 0, sem, done: None }
    }

    fn push(&mut self, b: Bytes, permits: u32) {
        self.len += b.len() as u64;
        self.queued += b.len();
        self.queue.push_back((b, permits));
    }

    /// Queues MD5's padding: 0x80, zeros to 56 mod 64, the bit length.
    fn pad(&mut self) {
        let bits = self.len.wrapping_mul(8);
        let zeros = (55usize.wrapping_sub(self.len as usize)) % 64;
        let mut p = Vec::with_capacity(1 + zeros + 8);
        p.push(0x80);
        p.resize(1 + zeros, 0);
        p.extend_from_slice(&bits.to_le_bytes());
        self.queued += p.len();
        self.queue.push_back((Bytes::from(p), 0));
    }

    /// Copies the next 64-byte block into `out` (the caller checked that
    /// one is queued) and gives back the permits of frames used up.
    fn take_block(&mut self, out: &mut [u8]) {
        let mut filled = 0;
        while filled < 64 {
            let Some((front, permits)) = self.queue.front() else { return };
            let n = (front.len() - self.off).min(64 - filled);
            out[filled..filled + n].copy_from_slice(&front[self.off..self.off + n]);
            filled += n;
            self.off += n;
            if self.off == front.len() {
                self.sem.add_permits(*permits as usize);
                self.queue.pop_front();
                self.off = 0;
            }
        }
        self.queued -= 64;
    }

    fn digest(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (i, w) in self.state.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

fn run(rx: mpsc::Receiver<Msg>) {
    let mut lanes: HashMap<u64, Lane> = HashMap::new();
    let mut order: VecDeque<u64> = VecDeque::new();
    let handle = |lanes: &mut HashMap<u64, Lane>, order: &mut VecDeque<u64>, m: Msg| match m {
        Msg::Open(id, sem) => {
            lanes.insert(id, Lane::new(sem));
            order.push_back(id);
        }
        Msg::Data(id, b, permits) => {
            if let Some(l) = lanes.get_mut(&id) {
                l.push(b, permits);
            }
        }
        Msg::Finish(id, tx) => {
            if let Some(l) = lanes.get_mut(&id) {
                l.pad();
                l.done = Some(tx);
            }
        }
        Msg::Close(id) => {
            lanes.remove(&id);
            order.retain(|x| *x != id);
        }
    };
    loop {
        let ready = lanes.values().any(|l| l.queued >= 64);
        if !ready {
            match rx.recv() {
                Ok(m) => handle(&mut lanes, &mut order, m),
                Err(_) => return,
            }
        }
        while let Ok(m) = rx.try_recv() {
            handle(&mut lanes, &mut order, m);
        }
        // Up to 16 streams with a block ready, oldest first.
        let mut active: Vec<u64> = Vec::with_capacity(16);
        for id in &order {
            if active.len() == 16 {
                break;
            }
            if lanes.get(id).is_some_and(|l| l.queued >= 64) {
                active.push(*id);
            }
        }
        if !active.is_empty() {
            let mut picked: Vec<Lane> = active.iter().filter_map(|id| lanes.remove(id)).collect();
            let blocks = picked.iter().map(|l| l.queued / 64).max().unwrap_or(0).min(RUN_BLOCKS_MAX);
            hash_lanes(&mut picked, blocks);
            for (id, l) in active.iter().zip(picked) {
                lanes.insert(*id, l);
            }
        }
        // Streams whose last block is hashed answer and leave.
        let finished: Vec<u64> = lanes.iter().filter(|(_, l)| l.done.is_some() && l.queued == 0).map(|(id, _)| *id).collect();
        for id in finished {
            if let Some(mut l) = lanes.remove(&id)
                && let Some(tx) = l.done.take()
            {
                let _ = tx.send(l.digest());
            }
            order.retain(|x| *x != id);
        }
    }
}

/// Hashes up to `blocks` blocks of each of up to 16 lanes (a lane that
/// runs out sits the remaining steps out).
fn hash_lanes(lanes: &mut [Lane], blocks: usize) {
    let mut states = [[0u32; 4]; 16];
    for (s, l) in states.iter_mut().zip(lanes.iter()) {
        *s = l.state;
    }
    let n = lanes.len().min(16);
    kernel::run(&mut states, n, blocks, |staging| {
        let mut mask = 0u16;
        for (i, l) in lanes.iter_mut().take(n).enumerate() {
            if l.queued >= 64 {
                l.take_block(&mut staging[i * 64..i * 64 + 64]);
                mask |= 1 << i;
            }
        }
        mask
    });
    for (s, l) in states.iter().zip(lanes.iter_mut()) {
        l.state = *s;
    }
}

/// The 64 steps of RFC 1321 in order, for the kernels to unroll: each is
/// `a = b + ((a + f(b, c, d) + w[i] + k) <<< s)`, given as `$step!(a, b, c,
/// d, f, i, k, s)` with the roles of the four state words rotating.
macro_rules! md5_steps {
    ($step:ident, $a:ident, $b:ident, $c:ident, $d:ident) => {
        $step!($a, $b, $c, $d, F, 0, 0xd76aa478, 7);
        $step!($d, $a, $b, $c, F, 1, 0xe8c7b756, 12);
        $step!($c, $d, $a, $b, F, 2, 0x242070db, 17);
        $step!($b, $c, $d, $a, F, 3, 0xc1bdceee, 22);
        $step!($a, $b, $c, $d, F, 4, 0xf57c0faf, 7);
        $step!($d, $a, $b, $c, F, 5, 0x4787c62a, 12);
        $step!($c, $d, $a, $b, F, 6, 0xa8304613, 17);
        $step!($b, $c, $d, $a, F, 7, 0xfd469501, 22);
        $step!($a, $b, $c, $d, F, 8, 0x698098d8, 7);
        $step!($d, $a, $b, $c, F, 9, 0x8b44f7af, 12);
        $step!($c, $d, $a, $b, F, 10, 0xffff5bb1, 17);
        $step!($b, $c, $d, $a, F, 11, 0x895cd7be, 22);
        $step!($a, $b, $c, $d, F, 12, 0x6b901122, 7);
        $step!($d, $a, $b, $c, F, 13, 0xfd987193, 12);
        $step!($c, $d, $a, $b, F, 14, 0xa679438e, 17);
        $step!($b, $c, $d, $a, F, 15, 0x49b40821, 22);
        $step!($a, $b, $c, $d, G, 1, 0xf61e2562, 5);
        $step!($d, $a, $b, $c, G, 6, 0xc040b340, 9);
        $step!($c, $d, $a, $b, G, 11, 0x265e5a51, 14);
        $step!($b, $c, $d, $a, G, 0, 0xe9b6c7aa, 20);
        $step!($a, $b, $c, $d, G, 5, 0xd62f105d, 5);
        $step!($d, $a, $b, $c, G, 10, 0x02441453, 9);
        $step!($c, $d, $a, $b, G, 15, 0xd8a1e681, 14);
        $step!($b, $c, $d, $a, G, 4, 0xe7d3fbc8, 20);
        $step!($a, $b, $c, $d, G, 9, 0x21e1cde6, 5);
        $step!($d, $a, $b, $c, G, 14, 0xc33707d6, 9);
        $step!($c, $d, $a, $b, G, 3, 0xf4d50d87, 14);
        $step!($b, $c, $d, $a, G, 8, 0x455a14ed, 20);
        $step!($a, $b, $c, $d, G, 13, 0xa9e3e905, 5);
        $step!($d, $a, $b, $c, G, 2, 0xfcefa3f8, 9);
        $step!($c, $d, $a, $b, G, 7, 0x676f02d9, 14);
        $step!($b, $c, $d, $a, G, 12, 0x8d2a4c8a, 20);
        $step!($a, $b, $c, $d, H, 5, 0xfffa3942, 4);
        $step!($d, $a, $b, $c, H, 8, 0x8771f681, 11);
        $step!($c, $d, $a, $b, H, 11, 0x6d9d6122, 16);
        $step!($b, $c, $d, $a, H, 14, 0xfde5380c, 23);
        $step!($a, $b, $c, $d, H, 1, 0xa4beea44, 4);
        $step!($d, $a, $b, $c, H, 4, 0x4bdecfa9, 11);
        $step!($c, $d, $a, $b, H, 7, 0xf6bb4b60, 16);
        $step!($b, $c, $d, $a, H, 10, 0xbebfbc70, 23);
        $step!($a, $b, $c, $d, H, 13, 0x289b7ec6, 4);
        $step!($d, $a, $b, $c, H, 0, 0xeaa127fa, 11);
        $step!($c, $d, $a, $b, H, 3, 0xd4ef3085, 16);
        $step!($b, $c, $d, $a, H, 6, 0x04881d05, 23);
        $step!($a, $b, $c, $d, H, 9, 0xd9d4d039, 4);
        $step!($d, $a, $b, $c, H, 12, 0xe6db99e5, 11);
        $step!($c, $d, $a, $b, H, 15, 0x1fa27cf8, 16);
        $step!($b, $c, $d, $a, H, 2, 0xc4ac5665, 23);
        $step!($a, $b, $c, $d, I, 0, 0xf4292244, 6);
        $step!($d, $a, $b, $c, I, 7, 0x432aff97, 10);
        $step!($c, $d, $a, $b, I, 14, 0xab9423a7, 15);
        $step!($b, $c, $d, $a, I, 5, 0xfc93a039, 21);
        $step!($a, $b, $c, $d, I, 12, 0x655b59c3, 6);
        $step!($d, $a, $b, $c, I, 3, 0x8f0ccc92, 10);
        $step!($c, $d, $a, $b, I, 10, 0xffeff47d, 15);
        $step!($b, $c, $d, $a, I, 1, 0x85845dd1, 21);
        $step!($a, $b, $c, $d, I, 8, 0x6fa87e4f, 6);
        $step!($d, $a, $b, $c, I, 15, 0xfe2ce6e0, 10);
        $step!($c, $d, $a, $b, I, 6, 0xa3014314, 15);
        $step!($b, $c, $d, $a, I, 13, 0x4e0811a1, 21);
        $step!($a, $b, $c, $d, I, 4, 0xf7537e82, 6);
        $step!($d, $a, $b, $c, I, 11, 0xbd3af235, 10);
        $step!($c, $d, $a, $b, I, 2, 0x2ad7d2bb, 15);
        $step!($b, $c, $d, $a, I, 9, 0xeb86d391, 21);
    };
}

/// RFC 1321's four functions as AVX-512 ternary-logic tables: F = b ? c : d,
/// G = d ? b : c, H = b ^ c ^ d, I = c ^ (b | !d); one instruction each.
macro_rules! ternary {
    ($op:ident, F, $b:ident, $c:ident, $d:ident) => {
        $op::<0xCA>($b, $c, $d)
    };
    ($op:ident, G, $b:ident, $c:ident, $d:ident) => {
        $op::<0xCA>($d, $b, $c)
    };
    ($op:ident, H, $b:ident, $c:ident, $d:ident) => {
        $op::<0x96>($b, $c, $d)
    };
    ($op:ident, I, $b:ident, $c:ident, $d:ident) => {
        $op::<0x39>($b, $c, $d)
    };
}

mod kernel {
    pub(super) fn available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Hashes whole 64-byte blocks of one stream into `state`, in plain
    /// integer code written so that each step waits as little as it can on
    /// the step before: `a + w + k` and whatever of the function does not
    /// involve `b` are summed ahead, and G adds its two halves instead of
    /// or-ing them (they share no bits), so only `b & d` waits for `b`.
    pub(super) fn single(state: &mut [u32; 4], blocks: &[u8]) {
        let [mut a, mut b, mut c, mut d] = *state;
        for block in blocks.chunks_exact(64) {
            let w: [u32; 16] = std::array::from_fn(|i| u32::from_le_bytes([block[4 * i], block[4 * i + 1], block[4 * i + 2], block[4 * i + 3]]));
            let (a0, b0, c0, d0) = (a, b, c, d);
            // `opaque` stops the compiler from moving the constant (or the
            // parts computed ahead) after the function of `b`, onto the chain.
            macro_rules! step {
                ($a:ident, $b:ident, $c:ident, $d:ident, F, $i:literal, $k:literal, $s:literal) => {
                    let t = opaque($a.wrapping_add(w[$i].wrapping_add($k))).wrapping_add((($c ^ $d) & $b) ^ $d);
                    $a = $b.wrapping_add(t.rotate_left($s));
                };
                ($a:ident, $b:ident, $c:ident, $d:ident, G, $i:literal, $k:literal, $s:literal) => {
                    let t = opaque($a.wrapping_add(w[$i].wrapping_add($k)).wrapping_add($c & !$d)).wrapping_add($b & $d);
                    $a = $b.wrapping_add(t.rotate_left($s));
                };
                ($a:ident, $b:ident, $c:ident, $d:ident, H, $i:literal, $k:literal, $s:literal) => {
                    let t = opaque($a.wrapping_add(w[$i].wrapping_add($k))).wrapping_add(opaque($c ^ $d) ^ $b);
                    $a = $b.wrapping_add(t.rotate_left($s));
                };
                ($a:ident, $b:ident, $c:ident, $d:ident, I, $i:literal, $k:literal, $s:literal) => {
                    let t = opaque($a.wrapping_add(w[$i].wrapping_add($k))).wrapping_add(($b | opaque(!$d)) ^ $c);
                    $a = $b.wrapping_add(t.rotate_left($s));
                };
            }
            md5_steps!(step, a, b, c, d);
            (a, b, c, d) = (a.wrapping_add(a0), b.wrapping_add(b0), c.wrapping_add(c0), d.wrapping_add(d0));
        }
        *state = [a, b, c, d];
    }

    /// `x`, in a register the optimizer cannot see into (an empty `asm!`):
    /// no instruction, but the value is used as computed.
    #[inline(always)]
    fn opaque(mut x: u32) -> u32 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the template is a comment; it reads and writes only `x`.
        unsafe {
            std::arch::asm!("/* {0:e} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags));
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: as above.
        unsafe {
            std::arch::asm!("/* {0:w} */", inout(reg) x, options(pure, nomem, nostack, preserves_flags));
        }
        x
    }

    /// 16 lanes of 64 bytes, lane `i` at `[i*64, i*64+64)`.
    #[repr(C, align(64))]
    struct Staging([u8; 1024]);

    /// Hashes up to `blocks` blocks into the first `n` of `states`; `fill`
    /// puts the next block of each lane that has one into the staging area
    /// and returns the mask of those lanes (0 ends the run early). Only
    /// call when [`available`] is true.
    pub(super) fn run(states: &mut [[u32; 4]; 16], n: usize, blocks: usize, mut fill: impl FnMut(&mut [u8]) -> u16) {
        #[cfg(target_arch = "x86_64")]
        {
            assert!(available(), "the MD5 kernel needs AVX-512F");
            let mut staging = Staging([0; 1024]);
            // SAFETY: AVX-512F is present (checked above); every pointer
            // the kernel reads or writes is into `states` or `staging`.
            unsafe { avx512::run(states, n, blocks, &mut staging.0, &mut fill) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (states, n, blocks, &mut fill);
            unreachable!("the MD5 kernel needs AVX-512F");
        }
    }

    #[cfg(target_arch = "x86_64")]
    mod avx512 {
        use std::arch::x86_64::*;

        #[target_feature(enable = "avx512f")]
        pub(super) fn run(states: &mut [[u32; 4]; 16], n: usize, blocks: usize, staging: &mut [u8; 1024], fill: &mut dyn FnMut(&mut [u8]) -> u16) {
            // Word j of lane i sits at u32 index i*16 + j of the staging area;
            // state word j of lane i at index i*4 + j of `states`.
            let msg_idx = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
            let st_idx = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48, 52, 56, 60);
            let sp = states.as_mut_ptr() as *mut u32;
            // SAFETY (every gather/scatter below): indices stay inside
            // `states` (64 u32) and `staging` (256 u32).
            let mut v = unsafe {
                [
                    _mm512_i32gather_epi32::<4>(st_idx, sp as *const i32),
                    _mm512_i32gather_epi32::<4>(st_idx, sp.add(1) as *const i32),
                    _mm512_i32gather_epi32::<4>(st_idx, sp.add(2) as *const i32),
                    _mm512_i32gather_epi32::<4>(st_idx, sp.add(3) as *const i32),
                ]
            };
            for _ in 0..blocks {
                let lanes: __mmask16 = fill(&mut staging[..]);
                if lanes == 0 {
                    break;
                }
                let mp = staging.as_ptr() as *const i32;
                let w: [__m512i; 16] = std::array::from_fn(|j| unsafe { _mm512_i32gather_epi32::<4>(msg_idx, mp.add(j)) });
                let [mut a, mut b, mut c, mut d] = v;
                macro_rules! step {
                    ($a:ident, $b:ident, $c:ident, $d:ident, $f:ident, $i:literal, $k:literal, $s:literal) => {
                        // `a + w + k` first: it does not wait for `b`.
                        let t = _mm512_add_epi32(
                            _mm512_add_epi32($a, _mm512_add_epi32(w[$i], _mm512_set1_epi32($k as u32 as i32))),
                            ternary!(_mm512_ternarylogic_epi32, $f, $b, $c, $d),
                        );
                        $a = _mm512_add_epi32($b, _mm512_rol_epi32::<$s>(t));
                    };
                }
                md5_steps!(step, a, b, c, d);
                // Lanes without a block this step keep their state.
                v = [
                    _mm512_mask_add_epi32(v[0], lanes, v[0], a),
                    _mm512_mask_add_epi32(v[1], lanes, v[1], b),
                    _mm512_mask_add_epi32(v[2], lanes, v[2], c),
                    _mm512_mask_add_epi32(v[3], lanes, v[3], d),
                ];
            }
            let mask: __mmask16 = if n >= 16 { 0xffff } else { (1u16 << n) - 1 };
            for (j, x) in v.iter().enumerate() {
                unsafe { _mm512_mask_i32scatter_epi32::<4>(sp.add(j) as *mut i32, mask, st_idx, *x) };
            }
        }
    }
}

/// One stream's MD5, hashed on the caller's thread with [`kernel::single`].
/// Faster here than the `md-5` crate: `strata bench s3` prints both rates
/// in its header ("MD5 one stream").
pub(crate) struct Single {
    state: [u32; 4],
    buf: [u8; 64],
    buffered: usize,
    len: u64,
}

impl Single {
    pub fn new() -> Self {
        Self { state: INIT, buf: [0; 64], buffered: 0, len: 0 }
    }

    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.buffered > 0 {
            let take = (64 - self.buffered).min(data.len());
            self.buf[self.buffered..self.buffered + take].copy_from_slice(&data[..take]);
            self.buffered += take;
            data = &data[take..];
            if self.buffered < 64 {
                return;
            }
            kernel::single(&mut self.state, &self.buf);
            self.buffered = 0;
        }
        let whole = data.len() / 64 * 64;
        kernel::single(&mut self.state, &data[..whole]);
        let rest = &data[whole..];
        self.buf[..rest.len()].copy_from_slice(rest);
        self.buffered = rest.len();
    }

    pub fn finalize(mut self) -> [u8; 16] {
        // RFC 1321 padding: 0x80, zeros, the bit length in 8 bytes.
        let n = self.buffered;
        self.buf[n] = 0x80;
        self.buf[n + 1..].fill(0);
        if n >= 56 {
            kernel::single(&mut self.state, &self.buf);
            self.buf.fill(0);
        }
        self.buf[56..].copy_from_slice(&self.len.wrapping_mul(8).to_le_bytes());
        kernel::single(&mut self.state, &self.buf);
        let mut out = [0u8; 16];
        for (o, w) in out.chunks_exact_mut(4).zip(self.state) {
            o.copy_from_slice(&w.to_le_bytes());
        }
        out
    }
}

/// MB/s of the `md-5` crate over one stream of `mib` MiB, the baseline
/// of [`Single`] in `strata bench s3`'s header.
pub fn crate_throughput(mib: usize) -> f64 {
    use md5::Digest;
    let data = vec![0x5au8; mib << 20];
    #[allow(clippy::disallowed_methods)]
    let t = std::time::Instant::now();
    std::hint::black_box(md5::Md5::digest(&data));
    (mib << 20) as f64 / t.elapsed().as_secs_f64() / 1e6
}

/// MB/s of MD5 over `streams` concurrent streams of `mib` MiB each: through
/// the pool, or with `md-5` on blocking threads when `pool` is false or
/// there is no pool. For `strata bench s3`'s header.
pub async fn throughput(streams: usize, mib: usize, use_pool: bool) -> f64 {
    let data = Bytes::from(vec![0x5au8; mib << 20]);
    #[allow(clippy::disallowed_methods)]
    let t = std::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..streams {
        let d = data.clone();
        tasks.push(tokio::spawn(async move {
            match pool().filter(|_| use_pool) {
                Some(p) => {
                    let s = p.stream();
                    for c in d.chunks(256 << 10) {
                        s.update(d.slice_ref(c)).await;
                    }
                    s.finish().await.is_some()
                }
                None => tokio::task::spawn_blocking(move || {
                    let mut h = Single::new();
                    for c in d.chunks(256 << 10) {
                        h.update(c);
                    }
                    std::hint::black_box(h.finalize());
                })
                .await
                .is_ok(),
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    (streams * (mib << 20)) as f64 / t.elapsed().as_secs_f64() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use md5::{Digest, Md5};
    use rand::{Rng, SeedableRng};

    fn reference(data: &[u8]) -> [u8; 16] {
        Md5::digest(data).into()
    }

    #[test]
    fn kernel_matches_md5_for_every_lane_count() {
        if !kernel::available() {
            eprintln!("no AVX-512F here: the kernel is not used");
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for n in 1..=16usize {
            // Each lane: its own data, a whole number of blocks after padding.
            let datas: Vec<Vec<u8>> = (0..n).map(|_| (0..rng.random_range(0..300)).map(|_| rng.random()).collect()).collect();
            let mut lanes: Vec<Lane> = datas
                .iter()
                .map(|d| {
                    let mut l = Lane::new(Arc::new(Semaphore::new(QUEUED_BYTES_MAX)));
                    l.push(Bytes::from(d.clone()), 0);
                    l.pad();
                    l
                })
                .collect();
            while lanes.iter().any(|l| l.queued > 0) {
                let mut busy: Vec<Lane> = Vec::new();
                let mut idle: Vec<Lane> = Vec::new();
                for l in lanes.drain(..) {
                    if l.queued > 0 { busy.push(l) } else { idle.push(l) }
                }
                // Lanes of different lengths: the short ones sit steps out.
                let blocks = busy.iter().map(|l| l.queued / 64).max().unwrap_or(0).min(3);
                hash_lanes(&mut busy, blocks);
                lanes = busy.into_iter().chain(idle).collect();
            }
            let mut got: Vec<[u8; 16]> = lanes.iter().map(|l| l.digest()).collect();
            let mut want: Vec<[u8; 16]> = datas.iter().map(|d| reference(d)).collect();
            got.sort();
            want.sort();
            assert_eq!(got, want, "{n} lanes");
        }
    }

    #[test]
    fn one_stream_matches_md5_for_any_split() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        // Every padding case (lengths around 56 and 64) and longer bodies
        // fed in pieces that cut blocks anywhere.
        for len in (0..200).chain([1000, 4095, 4096, 65_537, 1 << 20]) {
            let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            let mut h = Single::new();
            let mut rest = &data[..];
            while !rest.is_empty() {
                let n = rng.random_range(1..=rest.len().min(300));
                h.update(&rest[..n]);
                rest = &rest[n..];
            }
            assert_eq!(h.finalize(), reference(&data), "{len} bytes");
        }
        assert_eq!(hex::encode(Single::new().finalize()), "d41d8cd98f00b204e9800998ecf8427e", "RFC 1321's empty string");
        let mut h = Single::new();
        h.update(b"message digest");
        assert_eq!(hex::encode(h.finalize()), "f96b697d7cb7938d525a2f31aaf161d0", "RFC 1321's test suite");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_streams_match_md5() {
        let Some(pool) = pool() else {
            eprintln!("no AVX-512F here: the pool is not used");
            return;
        };
        let mut tasks = Vec::new();
        for seed in 0..40u64 {
            tasks.push(tokio::spawn(async move {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                let len = match seed % 4 {
                    0 => rng.random_range(0..100),
                    1 => rng.random_range(0..5000),
                    2 => rng.random_range(60_000..70_000),
                    _ => rng.random_range(1..3) << 20,
                };
                let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                let data = Bytes::from(data);
                let s = pool.stream();
                let mut at = 0;
                while at < data.len() {
                    let n = rng.random_range(1..=(data.len() - at).min(70_000));
                    s.update(data.slice(at..at + n)).await;
                    at += n;
                    if rng.random_bool(0.1) {
                        tokio::task::yield_now().await;
                    }
                }
                (s.finish().await, reference(&data), len)
            }));
        }
        // A stream dropped halfway does not disturb the others.
        let dropped = pool.stream();
        dropped.update(Bytes::from_static(&[1; 1000])).await;
        drop(dropped);
        for t in tasks {
            let (got, want, len) = t.await.unwrap();
            assert_eq!(got, Some(want), "a stream of {len} bytes");
        }
    }
}

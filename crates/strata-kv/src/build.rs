//! Building a version from records: every key filed into its (partition,
//! chunk) bucket, each bucket sorted by (digest prefix, key) and written as
//! a chunk, then the `.metadata`. The output depends only on the records
//! and the store definition, never on input order, memory limit or thread
//! timing: the Spark builder of part 2 must produce the same bytes.
//!
//! Memory is bounded: records gather in a buffer (one byte arena, fixed-size
//! entries); a full buffer is sorted and spilled to a run file by a
//! background thread while reading goes on. At the end every bucket's chunk
//! is written on its own, the buckets spread over the cores: from the
//! sorted buffer when nothing spilled, else by a k-way merge of that
//! bucket's part of every run.

use crate::format::{ChunkStats, ChunkWriter, FormatError};
use crate::placement::{KeyHash, Md5Hash, chunk_of, partition_of, prefix};
use crate::version::{FileSum, Layout, Metadata, StoreDef, VersionError};
use std::collections::BTreeMap;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// What to do with a key given twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Duplicates {
    /// Fail, naming the key.
    #[default]
    Fail,
    /// Keep the last value given.
    LastWins,
}

/// What a build produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct BuildReport {
    /// Records written (each once, however many replicas).
    pub records: u64,
    /// Node folders written (0: a single-node build).
    pub nodes: u64,
    /// Bytes of keys and values read.
    pub input_bytes: u64,
    /// Prefixes shared by more than one key.
    pub collided_prefixes: u64,
    /// Duplicate keys dropped (last-wins only).
    pub duplicates_dropped: u64,
    /// Bytes of chunk files written.
    pub output_bytes: u64,
    /// Sorted runs spilled to disk (0: everything fit in memory).
    pub runs: u64,
}

/// A record in a buffer: its place in the chunk order and where its key
/// and value sit in the buffer's bytes. Records sort by (bucket, prefix,
/// key, input position): the chunk order, with a repeated key's last value
/// last.
#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    prefix: u64,
    seq: u64,
    off: u64,
    bucket: u32,
    klen: u32,
    vlen: u32,
}

/// Records in memory: one byte arena and fixed-size entries, so adding a
/// record allocates nothing of its own and sorting moves 40-byte entries.
#[derive(Default)]
struct Buffer {
    data: Vec<u8>,
    entries: Vec<Entry>,
}

/// Size of a run record's header: bucket, prefix, seq, key and value sizes.
const RUN_HEADER: usize = 28;

impl Buffer {
    fn key(&self, e: &Entry) -> &[u8] {
        &self.data[e.off as usize..][..e.klen as usize]
    }
    fn value(&self, e: &Entry) -> &[u8] {
        &self.data[e.off as usize + e.klen as usize..][..e.vlen as usize]
    }
    fn bytes(&self) -> usize {
        self.data.len() + self.entries.len() * std::mem::size_of::<Entry>()
    }

    /// Sorts into chunk order: a counting sort by bucket, then every
    /// bucket sorted on its own, the buckets spread over `threads`.
    /// Returns where each bucket starts (`buckets + 1` indices).
    fn sort(&mut self, buckets: u32, threads: usize) -> Vec<usize> {
        let mut starts = vec![0usize; buckets as usize + 1];
        for e in &self.entries {
            starts[e.bucket as usize + 1] += 1;
        }
        for b in 0..buckets as usize {
            starts[b + 1] += starts[b];
        }
        let mut sorted = vec![Entry::default(); self.entries.len()];
        let mut next = starts.clone();
        for e in &self.entries {
            sorted[next[e.bucket as usize]] = *e;
            next[e.bucket as usize] += 1;
        }
        let mut slices = Vec::with_capacity(buckets as usize);
        let mut rest = sorted.as_mut_slice();
        for b in 0..buckets as usize {
            let (head, tail) = rest.split_at_mut(starts[b + 1] - starts[b]);
            slices.push(head);
            rest = tail;
        }
        let queue = std::sync::Mutex::new(slices);
        let data = &self.data;
        std::thread::scope(|sc| {
            for _ in 0..threads.max(1) {
                sc.spawn(|| {
                    loop {
                        let Some(slice) = queue.lock().unwrap_or_else(|p| p.into_inner()).pop() else { return };
                        slice.sort_unstable_by(|a, b| {
                            a.prefix
                                .cmp(&b.prefix)
                                .then_with(|| data[a.off as usize..][..a.klen as usize].cmp(&data[b.off as usize..][..b.klen as usize]))
                                .then(a.seq.cmp(&b.seq))
                        });
                    }
                });
            }
        });
        self.entries = sorted;
        starts
    }

    /// Sorts and writes the buffer as a run file; returns the byte offset
    /// where each bucket starts in it (`buckets + 1` offsets).
    fn write_run(mut self, path: &Path, buckets: u32, threads: usize) -> std::io::Result<Vec<u64>> {
        let starts = self.sort(buckets, threads);
        let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
        let mut offsets = Vec::with_capacity(starts.len());
        let mut pos = 0u64;
        for b in 0..buckets as usize {
            offsets.push(pos);
            for e in &self.entries[starts[b]..starts[b + 1]] {
                let mut h = [0u8; RUN_HEADER];
                h[0..4].copy_from_slice(&e.bucket.to_le_bytes());
                h[4..12].copy_from_slice(&e.prefix.to_le_bytes());
                h[12..20].copy_from_slice(&e.seq.to_le_bytes());
                h[20..24].copy_from_slice(&e.klen.to_le_bytes());
                h[24..28].copy_from_slice(&e.vlen.to_le_bytes());
                w.write_all(&h)?;
                w.write_all(self.key(e))?;
                w.write_all(self.value(e))?;
                pos += (RUN_HEADER + e.klen as usize + e.vlen as usize) as u64;
            }
        }
        offsets.push(pos);
        w.flush()?;
        Ok(offsets)
    }
}

/// A spilled run: its file and where each bucket starts in it.
struct Run {
    path: PathBuf,
    offsets: Vec<u64>,
}

/// Builds one version with bounded memory.
pub struct Builder {
    store: StoreDef,
    out: PathBuf,
    duplicates: Duplicates,
    memory_limit: usize,
    threads: usize,
    /// For a ring: each primary partition's nodes in replica order.
    table: Option<Vec<Vec<u32>>>,
    replicas: u32,
    buffer: Buffer,
    seq: u64,
    runs: Vec<Run>,
    spilling: Option<(PathBuf, std::thread::JoinHandle<std::io::Result<Vec<u64>>>)>,
    report: BuildReport,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VersionError + '_ {
    move |source| VersionError::Io { path: path.to_path_buf(), source }
}

/// Threads for hashing, sorting and writing chunks.
fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(8)
}

impl Builder {
    /// A builder writing to `out` (created; must not hold chunk files),
    /// keeping at most about `memory_limit` bytes of records in memory
    /// (twice that while a spill runs).
    pub fn new(store: &StoreDef, out: &Path, duplicates: Duplicates, memory_limit: usize) -> Result<Self, VersionError> {
        if store.replication != 1 {
            return Err(VersionError::Invalid(format!(
                "store {} keeps {} replicas: it is built for a ring, from its replica table",
                store.name, store.replication
            )));
        }
        Self::create(store, out, duplicates, memory_limit, None)
    }

    /// A builder for a store spread over a ring: `table` gives each primary
    /// partition's nodes in replica order (`strata_placement::spock`). Every
    /// record goes to each of its partition's replicas; node `n`'s chunk
    /// files and `.metadata` go to `out/node-<n>/`.
    pub fn for_ring(store: &StoreDef, out: &Path, duplicates: Duplicates, memory_limit: usize, table: Vec<Vec<u32>>) -> Result<Self, VersionError> {
        if table.len() != store.partitions as usize {
            return Err(VersionError::Invalid(format!("the replica table has {} partitions, the store {}", table.len(), store.partitions)));
        }
        if let Some((p, row)) = table.iter().enumerate().find(|(_, row)| row.len() != store.replication as usize) {
            return Err(VersionError::Invalid(format!("partition {p} has {} replicas in the table, the store keeps {}", row.len(), store.replication)));
        }
        for node in table.iter().flatten().collect::<std::collections::BTreeSet<_>>() {
            let d = out.join(format!("node-{node}"));
            std::fs::create_dir_all(&d).map_err(io(&d))?;
        }
        Self::create(store, out, duplicates, memory_limit, Some(table))
    }

    fn create(store: &StoreDef, out: &Path, duplicates: Duplicates, memory_limit: usize, table: Option<Vec<Vec<u32>>>) -> Result<Self, VersionError> {
        store.validate()?;
        std::fs::create_dir_all(out).map_err(io(out))?;
        Ok(Self {
            store: store.clone(),
            out: out.to_path_buf(),
            duplicates,
            memory_limit: memory_limit.max(1 << 16),
            threads: default_threads(),
            replicas: store.replication,
            table,
            buffer: Buffer::default(),
            seq: 0,
            runs: Vec::new(),
            spilling: None,
            report: BuildReport::default(),
        })
    }

    /// Buckets: (partition, replica, chunk) triples, numbered as Voldemort's
    /// reducers are, `(partition * replicas + replica) * chunks + chunk`.
    fn buckets(&self) -> u32 {
        self.store.partitions * self.replicas * self.store.chunks
    }

    /// The bucket of replica 0 of a key's chunk.
    fn first_bucket(&self, d: &[u8; 16]) -> u32 {
        partition_of(d, self.store.partitions) * self.replicas * self.store.chunks + chunk_of(d, self.store.chunks)
    }

    /// Adds a record.
    pub fn add(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), VersionError> {
        let d = Md5Hash.digest(&key);
        self.push(self.first_bucket(&d), prefix(&d), &key, &value)
    }

    /// Adds many records, hashing them on every core first.
    pub fn add_batch(&mut self, batch: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), VersionError> {
        let (parts, chunks, replicas) = (self.store.partitions, self.store.chunks, self.replicas);
        let per = batch.len().div_ceil(self.threads).max(1);
        let placed: Vec<(u32, u64)> = std::thread::scope(|sc| {
            let hs: Vec<_> = batch
                .chunks(per)
                .map(|part| {
                    sc.spawn(move || {
                        part.iter()
                            .map(|(k, _)| {
                                let d = Md5Hash.digest(k);
                                (partition_of(&d, parts) * replicas * chunks + chunk_of(&d, chunks), prefix(&d))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
        });
        if placed.len() != batch.len() {
            return Err(VersionError::Invalid("a hashing thread panicked".into()));
        }
        for ((key, value), (bucket, prefix)) in batch.iter().zip(placed) {
            self.push(bucket, prefix, key, value)?;
        }
        Ok(())
    }

    fn push(&mut self, bucket: u32, prefix: u64, key: &[u8], value: &[u8]) -> Result<(), VersionError> {
        if key.len() > u32::MAX as usize || value.len() > u32::MAX as usize {
            return Err(FormatError::Order(format!("a key or value of {} bytes is over 4 GiB", key.len().max(value.len()))).into());
        }
        self.report.input_bytes += (key.len() + value.len()) as u64;
        let b = &mut self.buffer;
        if b.data.capacity() == 0 {
            b.data.reserve(self.memory_limit.min(64 << 20));
        }
        let off = b.data.len() as u64;
        b.data.extend_from_slice(key);
        b.data.extend_from_slice(value);
        // One entry per replica, all pointing at the same bytes.
        for r in 0..self.replicas {
            let bucket = bucket + r * self.store.chunks;
            b.entries.push(Entry { prefix, seq: self.seq, off, bucket, klen: key.len() as u32, vlen: value.len() as u32 });
        }
        self.seq += 1;
        if b.bytes() >= self.memory_limit {
            self.spill()?;
        }
        Ok(())
    }

    /// Records added so far.
    pub fn added(&self) -> u64 {
        self.seq
    }

    fn wait_spill(&mut self) -> Result<(), VersionError> {
        if let Some((path, h)) = self.spilling.take() {
            let r = h.join().map_err(|_| VersionError::Invalid("a spill thread panicked".into()))?;
            let offsets = r.map_err(io(&path))?;
            self.runs.push(Run { path, offsets });
        }
        Ok(())
    }

    /// Sorts the buffer and writes it as a run, on a background thread.
    fn spill(&mut self) -> Result<(), VersionError> {
        self.wait_spill()?;
        let buf = std::mem::take(&mut self.buffer);
        let path = self.out.join(format!(".run-{:05}", self.runs.len()));
        let (p, buckets, threads) = (path.clone(), self.buckets(), self.threads);
        self.spilling = Some((path, std::thread::spawn(move || buf.write_run(&p, buckets, threads))));
        Ok(())
    }

    /// Writes every chunk (buckets spread over the threads; from the sorted
    /// buffer, or merged from the runs) and then the metadata.
    pub fn finish(mut self) -> Result<BuildReport, VersionError> {
        let buckets = self.buckets();
        // The last buffer is never spilled: it is sorted in place and, if
        // runs were spilled, merged with them.
        self.wait_spill()?;
        self.report.runs = self.runs.len() as u64;
        let mut buf = std::mem::take(&mut self.buffer);
        let starts = buf.sort(buckets, self.threads);
        let memory = (buf, starts);
        let next = std::sync::atomic::AtomicU32::new(0);
        let failed = std::sync::atomic::AtomicBool::new(false);
        let results: std::sync::Mutex<Vec<(u32, Result<BucketOut, VersionError>)>> = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|sc| {
            for _ in 0..self.threads.max(1) {
                sc.spawn(|| {
                    while !failed.load(std::sync::atomic::Ordering::Relaxed) {
                        let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if b >= buckets {
                            return;
                        }
                        let (buf, starts) = &memory;
                        let mem = MemorySource { buf, entries: &buf.entries[starts[b as usize]..starts[b as usize + 1]], at: None };
                        let r = if self.runs.is_empty() {
                            self.write_bucket(b, &mut { mem })
                        } else {
                            MergeSource::open(&self.runs, b, mem).and_then(|mut src| self.write_bucket(b, &mut src))
                        };
                        if r.is_err() {
                            failed.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        results.lock().unwrap_or_else(|p| p.into_inner()).push((b, r));
                    }
                });
            }
        });
        let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
        results.sort_by_key(|(b, _)| *b);
        // Per node folder (`None`: a single-node build): files, records, collided prefixes.
        let mut folders: BTreeMap<Option<u32>, (Vec<FileSum>, u64, u64)> = BTreeMap::new();
        let mut first_error = None;
        for (b, r) in results {
            match r {
                Ok(o) => {
                    let (p, r) = self.bucket_place(b);
                    let f = folders.entry(self.node_of(p, r)).or_default();
                    f.0.extend(o.files);
                    f.1 += o.stats.records;
                    f.2 += o.stats.collided_prefixes;
                    if r == 0 {
                        self.report.records += o.stats.records;
                        self.report.collided_prefixes += o.stats.collided_prefixes;
                        self.report.duplicates_dropped += o.dropped;
                    }
                    self.report.output_bytes += o.stats.index_bytes + o.stats.data_bytes;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        for r in &self.runs {
            let _ = std::fs::remove_file(&r.path);
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        for (node, (files, records, collided)) in folders {
            let (dir, layout) = match (node, &self.table) {
                (Some(n), Some(t)) => (self.out.join(format!("node-{n}")), Layout::for_node(t, n)),
                _ => (self.out.clone(), Layout::single(&self.store)),
            };
            Metadata::write(&dir, &self.store, &layout, records, collided, files)?;
            self.report.nodes += u64::from(node.is_some());
        }
        Ok(self.report)
    }

    /// The (partition, replica) of a bucket.
    fn bucket_place(&self, b: u32) -> (u32, u32) {
        let c = self.store.chunks;
        (b / (self.replicas * c), (b / c) % self.replicas)
    }

    /// The node holding (partition, replica); `None` on a single-node build.
    fn node_of(&self, p: u32, r: u32) -> Option<u32> {
        self.table.as_ref().map(|t| t[p as usize][r as usize])
    }

    /// Writes bucket `b`'s chunk from its records in order, dropping or
    /// refusing repeated keys.
    fn write_bucket(&self, b: u32, src: &mut dyn Source) -> Result<BucketOut, VersionError> {
        let (p, r) = self.bucket_place(b);
        let dir = match self.node_of(p, r) {
            Some(n) => self.out.join(format!("node-{n}")),
            None => self.out.clone(),
        };
        let mut w = ChunkWriter::create(&dir, &StoreDef::chunk_name(p, r, b % self.store.chunks))?;
        // The record held back until the next shows it is not repeated.
        let (mut pk, mut pv, mut pp, mut held) = (Vec::new(), Vec::new(), 0u64, false);
        let mut dropped = 0;
        while src.advance()? {
            let (prefix, key, value) = src.current();
            if held && pp == prefix && pk == key {
                match self.duplicates {
                    Duplicates::Fail => return Err(FormatError::DuplicateKey(key.to_vec()).into()),
                    Duplicates::LastWins => {
                        dropped += 1;
                        pv.clear();
                        pv.extend_from_slice(value);
                        continue;
                    }
                }
            }
            if held {
                w.push(pp, &pk, &pv)?;
            }
            (pp, held) = (prefix, true);
            pk.clear();
            pk.extend_from_slice(key);
            pv.clear();
            pv.extend_from_slice(value);
        }
        if held {
            w.push(pp, &pk, &pv)?;
        }
        let stem = w.name().to_string();
        let stats = w.finish()?;
        let files = vec![
            FileSum { name: format!("{stem}.index"), bytes: stats.index_bytes, crc32c: stats.index_crc32c },
            FileSum { name: format!("{stem}.data"), bytes: stats.data_bytes, crc32c: stats.data_crc32c },
        ];
        Ok(BucketOut { files, stats, dropped })
    }
}

/// What writing one bucket's chunk produced.
struct BucketOut {
    files: Vec<FileSum>,
    stats: ChunkStats,
    dropped: u64,
}

/// One bucket's records in chunk order.
trait Source {
    /// Moves to the next record; false at the end.
    fn advance(&mut self) -> Result<bool, VersionError>;
    /// The current record: prefix, key, value.
    fn current(&self) -> (u64, &[u8], &[u8]);
}

/// A bucket of the sorted in-memory buffer.
struct MemorySource<'a> {
    buf: &'a Buffer,
    entries: &'a [Entry],
    at: Option<usize>,
}

impl Source for MemorySource<'_> {
    fn advance(&mut self) -> Result<bool, VersionError> {
        let next = self.at.map_or(0, |i| i + 1);
        self.at = Some(next);
        Ok(next < self.entries.len())
    }
    fn current(&self) -> (u64, &[u8], &[u8]) {
        let e = &self.entries[self.at.unwrap_or(0)];
        (e.prefix, self.buf.key(e), self.buf.value(e))
    }
}

/// One run's part of a bucket, read record by record into reused buffers.
struct Cursor {
    reader: std::io::Take<BufReader<std::fs::File>>,
    path: PathBuf,
    prefix: u64,
    seq: u64,
    key: Vec<u8>,
    value: Vec<u8>,
    live: bool,
}

impl Cursor {
    fn read(&mut self) -> Result<(), VersionError> {
        let mut h = [0u8; RUN_HEADER];
        if self.reader.limit() == 0 {
            self.live = false;
            return Ok(());
        }
        self.reader.read_exact(&mut h).map_err(io(&self.path))?;
        let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        let u64_at = |o: usize| u64::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3], h[o + 4], h[o + 5], h[o + 6], h[o + 7]]);
        self.prefix = u64_at(4);
        self.seq = u64_at(12);
        self.key.resize(u32_at(20) as usize, 0);
        self.value.resize(u32_at(24) as usize, 0);
        self.reader.read_exact(&mut self.key).map_err(io(&self.path))?;
        self.reader.read_exact(&mut self.value).map_err(io(&self.path))?;
        Ok(())
    }
}

/// A record's sort key in a bucket: prefix, key, input position.
type Head<'a> = (u64, &'a [u8], u64);

/// A k-way merge of one bucket's parts of every run and of the last
/// buffer. Runs are few (input size over the memory limit), so the
/// smallest is found by a scan.
struct MergeSource<'a> {
    cursors: Vec<Cursor>,
    memory: MemorySource<'a>,
    /// Whether `memory` has a record in hand.
    memory_live: bool,
    /// The cursor holding the current record; `cursors.len()` for memory.
    current: Option<usize>,
}

impl<'a> MergeSource<'a> {
    fn open(runs: &[Run], b: u32, mut memory: MemorySource<'a>) -> Result<Self, VersionError> {
        use std::io::{Seek, SeekFrom};
        let mut cursors = Vec::with_capacity(runs.len());
        for r in runs {
            let (start, end) = (r.offsets[b as usize], r.offsets[b as usize + 1]);
            let mut f = std::fs::File::open(&r.path).map_err(io(&r.path))?;
            f.seek(SeekFrom::Start(start)).map_err(io(&r.path))?;
            let reader = BufReader::with_capacity(256 << 10, f).take(end - start);
            let mut c = Cursor { reader, path: r.path.clone(), prefix: 0, seq: 0, key: Vec::new(), value: Vec::new(), live: true };
            c.read()?;
            cursors.push(c);
        }
        let memory_live = memory.advance()?;
        Ok(Self { cursors, memory, memory_live, current: None })
    }

    /// The record cursor `i` holds.
    fn head(&self, i: usize) -> Option<Head<'_>> {
        if i == self.cursors.len() {
            let seq = self.memory.entries.get(self.memory.at.unwrap_or(0)).map_or(0, |e| e.seq);
            return self.memory_live.then(|| {
                let (p, k, _) = self.memory.current();
                (p, k, seq)
            });
        }
        let c = &self.cursors[i];
        c.live.then_some((c.prefix, c.key.as_slice(), c.seq))
    }
}

impl Source for MergeSource<'_> {
    fn advance(&mut self) -> Result<bool, VersionError> {
        match self.current {
            Some(i) if i == self.cursors.len() => self.memory_live = self.memory.advance()?,
            Some(i) => self.cursors[i].read()?,
            None => {}
        }
        let mut best: Option<(usize, Head<'_>)> = None;
        for i in 0..=self.cursors.len() {
            if let Some(h) = self.head(i)
                && best.as_ref().is_none_or(|(_, b)| h < *b)
            {
                best = Some((i, h));
            }
        }
        self.current = best.map(|(i, _)| i);
        Ok(self.current.is_some())
    }
    fn current(&self) -> (u64, &[u8], &[u8]) {
        match self.current {
            Some(i) if i < self.cursors.len() => {
                let c = &self.cursors[i];
                (c.prefix, &c.key, &c.value)
            }
            _ => self.memory.current(),
        }
    }
}

/// The memory for records a build uses unless told otherwise (the CLI's
/// `--memory` default, and the benchmark's).
pub const DEFAULT_MEMORY: usize = 1 << 30;

/// Records hashed together by `add_batch` in the helpers.
pub const BATCH: usize = 65_536;

/// Builds a version of `store` in `out` from `records` held in memory.
pub fn build_in_memory(
    store: &StoreDef,
    records: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
    out: &Path,
    duplicates: Duplicates,
) -> Result<BuildReport, VersionError> {
    build_with_memory(store, records, out, duplicates, usize::MAX)
}

/// Builds a version keeping about `memory_limit` bytes of records in memory.
pub fn build_with_memory(
    store: &StoreDef,
    records: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
    out: &Path,
    duplicates: Duplicates,
    memory_limit: usize,
) -> Result<BuildReport, VersionError> {
    let mut b = Builder::new(store, out, duplicates, memory_limit)?;
    let mut batch = Vec::with_capacity(BATCH);
    for r in records {
        batch.push(r);
        if batch.len() == BATCH {
            b.add_batch(std::mem::replace(&mut batch, Vec::with_capacity(BATCH)))?;
        }
    }
    b.add_batch(batch)?;
    b.finish()
}

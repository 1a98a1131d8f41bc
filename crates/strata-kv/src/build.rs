//! Building a version from records: every key filed into its (partition,
//! chunk) bucket, each bucket sorted by (digest prefix, key) and written as
//! a chunk, then the `.metadata`. The output depends only on the records
//! and the store definition, never on input order, memory limit or thread
//! timing: the Spark builder of part 2 must produce the same bytes.
//!
//! Memory is bounded: records gather in a buffer; a full buffer is sorted
//! and spilled to a run file by a background thread while reading goes on;
//! at the end the runs are merged (k-way) straight into the chunk files.

use crate::format::{ChunkWriter, FormatError};
use crate::placement::{KeyHash, Md5Hash, chunk_of, partition_of, prefix};
use crate::version::{FileSum, Metadata, StoreDef, VersionError};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
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
    /// Tuples written.
    pub records: u64,
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

/// A record on its way to a chunk, ordered by (bucket, prefix, key, input
/// position): the chunk order, with a repeated key's last value last.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Tuple {
    bucket: u32,
    prefix: u64,
    key: Vec<u8>,
    seq: u64,
    value: Vec<u8>,
}

impl Tuple {
    fn bytes(&self) -> usize {
        self.key.len() + self.value.len() + 48
    }
    fn write(&self, w: &mut impl Write) -> std::io::Result<()> {
        w.write_all(&self.bucket.to_le_bytes())?;
        w.write_all(&self.prefix.to_le_bytes())?;
        w.write_all(&self.seq.to_le_bytes())?;
        w.write_all(&(self.key.len() as u32).to_le_bytes())?;
        w.write_all(&(self.value.len() as u32).to_le_bytes())?;
        w.write_all(&self.key)?;
        w.write_all(&self.value)
    }
    fn read(r: &mut impl Read) -> std::io::Result<Option<Self>> {
        let mut h = [0u8; 28];
        match r.read_exact(&mut h) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4"));
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8"));
        let mut key = vec![0u8; u32_at(20) as usize];
        let mut value = vec![0u8; u32_at(24) as usize];
        r.read_exact(&mut key)?;
        r.read_exact(&mut value)?;
        Ok(Some(Self { bucket: u32_at(0), prefix: u64_at(4), seq: u64_at(12), key, value }))
    }
}

/// Builds one version with bounded memory.
pub struct Builder {
    store: StoreDef,
    out: PathBuf,
    duplicates: Duplicates,
    memory_limit: usize,
    buffer: Vec<Tuple>,
    buffered: usize,
    seq: u64,
    runs: Vec<PathBuf>,
    spilling: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    report: BuildReport,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VersionError + '_ {
    move |source| VersionError::Io { path: path.to_path_buf(), source }
}

impl Builder {
    /// A builder writing to `out` (created; must not hold chunk files),
    /// keeping at most about `memory_limit` bytes of records in memory
    /// (twice that while a spill runs).
    pub fn new(store: &StoreDef, out: &Path, duplicates: Duplicates, memory_limit: usize) -> Result<Self, VersionError> {
        store.validate()?;
        std::fs::create_dir_all(out).map_err(io(out))?;
        Ok(Self {
            store: store.clone(),
            out: out.to_path_buf(),
            duplicates,
            memory_limit: memory_limit.max(1 << 16),
            buffer: Vec::new(),
            buffered: 0,
            seq: 0,
            runs: Vec::new(),
            spilling: None,
            report: BuildReport::default(),
        })
    }

    /// Adds a record.
    pub fn add(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<(), VersionError> {
        let d = Md5Hash.digest(&key);
        let bucket = partition_of(&d, self.store.partitions) * self.store.chunks + chunk_of(&d, self.store.chunks);
        self.push(bucket, prefix(&d), key, value)
    }

    /// Adds many records, hashing them on every core first.
    pub fn add_batch(&mut self, batch: Vec<(Vec<u8>, Vec<u8>)>) -> Result<(), VersionError> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
        let (parts, chunks) = (self.store.partitions, self.store.chunks);
        let per = batch.len().div_ceil(threads).max(1);
        let placed: Vec<(u32, u64)> = std::thread::scope(|sc| {
            let hs: Vec<_> = batch
                .chunks(per)
                .map(|part| {
                    sc.spawn(move || {
                        part.iter()
                            .map(|(k, _)| {
                                let d = Md5Hash.digest(k);
                                (partition_of(&d, parts) * chunks + chunk_of(&d, chunks), prefix(&d))
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
        for ((key, value), (bucket, prefix)) in batch.into_iter().zip(placed) {
            self.push(bucket, prefix, key, value)?;
        }
        Ok(())
    }

    fn push(&mut self, bucket: u32, prefix: u64, key: Vec<u8>, value: Vec<u8>) -> Result<(), VersionError> {
        self.report.input_bytes += (key.len() + value.len()) as u64;
        let t = Tuple { bucket, prefix, key, seq: self.seq, value };
        self.seq += 1;
        self.buffered += t.bytes();
        self.buffer.push(t);
        if self.buffered >= self.memory_limit {
            self.spill()?;
        }
        Ok(())
    }

    /// Records added so far.
    pub fn added(&self) -> u64 {
        self.seq
    }

    fn wait_spill(&mut self) -> Result<(), VersionError> {
        if let Some(h) = self.spilling.take() {
            let r = h.join().map_err(|_| VersionError::Invalid("a spill thread panicked".into()))?;
            r.map_err(io(&self.out))?;
        }
        Ok(())
    }

    /// Sorts the buffer and writes it as a run, on a background thread.
    fn spill(&mut self) -> Result<(), VersionError> {
        self.wait_spill()?;
        let mut buf = std::mem::take(&mut self.buffer);
        self.buffered = 0;
        let path = self.out.join(format!(".run-{:05}", self.runs.len()));
        self.runs.push(path.clone());
        self.spilling = Some(std::thread::spawn(move || {
            buf.sort_unstable();
            let mut w = BufWriter::with_capacity(1 << 20, std::fs::File::create(&path)?);
            for t in &buf {
                t.write(&mut w)?;
            }
            w.flush()
        }));
        Ok(())
    }

    /// Merges everything into chunk files and writes the metadata.
    pub fn finish(mut self) -> Result<BuildReport, VersionError> {
        let sorted: Box<dyn Iterator<Item = Result<Tuple, VersionError>>> = if self.runs.is_empty() {
            let mut buf = std::mem::take(&mut self.buffer);
            buf.sort_unstable();
            Box::new(buf.into_iter().map(Ok))
        } else {
            self.spill()?;
            self.wait_spill()?;
            self.report.runs = self.runs.len() as u64;
            Box::new(Merge::open(&self.runs)?)
        };
        let store = self.store.clone();
        let total_buckets = store.partitions * store.chunks;
        let mut next_bucket = 0u32;
        let mut writer: Option<ChunkWriter> = None;
        let mut pending: Option<Tuple> = None;
        let mut files = Vec::with_capacity(2 * total_buckets as usize);
        let mut finish_writer = |w: Option<ChunkWriter>, report: &mut BuildReport| -> Result<(), VersionError> {
            if let Some(w) = w {
                let stem = w.name().to_string();
                let s = w.finish()?;
                files.push(FileSum { name: format!("{stem}.index"), bytes: s.index_bytes, crc32c: s.index_crc32c });
                files.push(FileSum { name: format!("{stem}.data"), bytes: s.data_bytes, crc32c: s.data_crc32c });
                report.records += s.records;
                report.collided_prefixes += s.collided_prefixes;
                report.output_bytes += s.index_bytes + s.data_bytes;
            }
            Ok(())
        };
        let name = |b: u32| StoreDef::chunk_name(b / store.chunks, 0, b % store.chunks);
        for t in sorted.chain(std::iter::once(Ok(Tuple { bucket: u32::MAX, prefix: 0, key: Vec::new(), seq: 0, value: Vec::new() }))) {
            let t = t?;
            // A repeated key: keep the last (highest seq), or fail.
            if let Some(p) = &pending
                && p.bucket == t.bucket
                && p.prefix == t.prefix
                && p.key == t.key
            {
                match self.duplicates {
                    Duplicates::Fail => return Err(FormatError::DuplicateKey(t.key).into()),
                    Duplicates::LastWins => {
                        self.report.duplicates_dropped += 1;
                        pending = Some(t);
                        continue;
                    }
                }
            }
            if let Some(p) = pending.take() {
                // Open (and close) chunks up to p's bucket, empty ones too.
                while next_bucket <= p.bucket {
                    finish_writer(writer.take(), &mut self.report)?;
                    writer = Some(ChunkWriter::create(&self.out, &name(next_bucket))?);
                    next_bucket += 1;
                }
                writer.as_mut().expect("opened above").push(p.prefix, &p.key, &p.value)?;
            }
            if t.bucket != u32::MAX {
                pending = Some(t);
            }
        }
        finish_writer(writer.take(), &mut self.report)?;
        while next_bucket < total_buckets {
            finish_writer(Some(ChunkWriter::create(&self.out, &name(next_bucket))?), &mut self.report)?;
            next_bucket += 1;
        }
        for r in &self.runs {
            let _ = std::fs::remove_file(r);
        }
        Metadata::write(&self.out, &store, self.report.records, self.report.collided_prefixes, files)?;
        Ok(self.report)
    }
}

/// A k-way merge of sorted runs.
struct Merge {
    readers: Vec<BufReader<std::fs::File>>,
    heap: BinaryHeap<Reverse<(Tuple, usize)>>,
    paths: Vec<PathBuf>,
}

impl Merge {
    fn open(paths: &[PathBuf]) -> Result<Self, VersionError> {
        let mut readers = Vec::new();
        let mut heap = BinaryHeap::new();
        for (i, p) in paths.iter().enumerate() {
            let mut r = BufReader::with_capacity(1 << 20, std::fs::File::open(p).map_err(io(p))?);
            if let Some(t) = Tuple::read(&mut r).map_err(io(p))? {
                heap.push(Reverse((t, i)));
            }
            readers.push(r);
        }
        Ok(Self { readers, heap, paths: paths.to_vec() })
    }
}

impl Iterator for Merge {
    type Item = Result<Tuple, VersionError>;
    fn next(&mut self) -> Option<Self::Item> {
        let Reverse((t, i)) = self.heap.pop()?;
        match Tuple::read(&mut self.readers[i]) {
            Ok(Some(n)) => self.heap.push(Reverse((n, i))),
            Ok(None) => {}
            Err(e) => return Some(Err(io(&self.paths[i])(e))),
        }
        Some(Ok(t))
    }
}

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

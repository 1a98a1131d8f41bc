//! The chunk files of a read-only store (docs/formats.md, "Read-only store
//! chunk files"). A chunk is a pair:
//!
//! - `.index`: a 24-byte header, then one 16-byte entry per distinct
//!   8-byte MD5 prefix, sorted: the prefix (as the MD5's bytes, so byte
//!   order is numeric order) and the little-endian u64 offset of its group
//!   in the data file. Fixed-width entries: entry i is at 24 + 16·i, so a
//!   search needs no pointers (Spock §4.2.2).
//! - `.data`: a 16-byte header, then per prefix a group: the u32 count of
//!   tuples sharing the prefix, then per tuple u32 key length, u32 value
//!   length, the raw key, the value. Raw keys let a lookup tell colliding
//!   keys apart.
//!
//! Offsets are u64, not Voldemort's u32: a chunk is limited by the disk,
//! not by 2 or 4 GiB. The index costs 16 bytes a key instead of 12, which
//! keeps entries 8-byte aligned; a 10M-key chunk's index is 160 MB.
//! Files carry no checksum of their own: the version's `.metadata` lists
//! every file's size and CRC32C, checked before the version goes live.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// First bytes of an index file.
pub const INDEX_MAGIC: &[u8; 8] = b"STRKVIDX";
/// First bytes of a data file.
pub const DATA_MAGIC: &[u8; 8] = b"STRKVDAT";
/// Layout version of both files.
pub const FORMAT_VERSION: u16 = 1;
/// Index header size.
pub const INDEX_HEADER_BYTES: usize = 24;
/// Data header size.
pub const DATA_HEADER_BYTES: usize = 16;
/// Index entry size.
pub const ENTRY_BYTES: usize = 16;

/// Why a chunk cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// I/O on a chunk file.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Error.
        source: std::io::Error,
    },
    /// A file's bytes break the layout.
    #[error("{path}: {detail}")]
    Corrupt {
        /// File.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// Tuples arrived out of order, or a key twice.
    #[error("{0}")]
    Order(String),
    /// The same key twice in the input.
    #[error("duplicate key {} (use last-wins to keep the last value)", show_key(.0))]
    DuplicateKey(Vec<u8>),
}

/// A key for messages: quoted text if it is UTF-8, else hex.
pub fn show_key(k: &[u8]) -> String {
    match std::str::from_utf8(k) {
        Ok(s) => format!("{s:?}"),
        Err(_) => format!("0x{}", k.iter().map(|b| format!("{b:02x}")).collect::<String>()),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> FormatError + '_ {
    move |source| FormatError::Io { path: path.to_path_buf(), source }
}

/// What a written chunk holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChunkStats {
    /// Tuples.
    pub records: u64,
    /// Index entries (distinct prefixes).
    pub entries: u64,
    /// Prefixes shared by more than one key.
    pub collided_prefixes: u64,
    /// Size of the index file.
    pub index_bytes: u64,
    /// Size of the data file.
    pub data_bytes: u64,
    /// CRC32C of the index file, computed while writing.
    pub index_crc32c: u32,
    /// CRC32C of the data file, computed while writing.
    pub data_crc32c: u32,
}

/// The index header for `entries` entries.
fn index_header(entries: u64) -> [u8; INDEX_HEADER_BYTES] {
    let mut h = [0u8; INDEX_HEADER_BYTES];
    h[..8].copy_from_slice(INDEX_MAGIC);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[10..12].copy_from_slice(&(ENTRY_BYTES as u16).to_le_bytes());
    h[16..24].copy_from_slice(&entries.to_le_bytes());
    h
}

/// Writes one chunk from tuples given in (prefix, key) order.
pub struct ChunkWriter {
    name: String,
    index_path: PathBuf,
    data_path: PathBuf,
    index: BufWriter<File>,
    data: BufWriter<File>,
    data_pos: u64,
    /// The prefix being written, its tuple count, its tuples already laid
    /// out (reused across groups: no allocation per record), and its last
    /// key (for the order check).
    group: Option<u64>,
    group_count: u32,
    group_bytes: Vec<u8>,
    last_key: Vec<u8>,
    /// CRC32C of the index entries and of the data so far, so the version's
    /// `.metadata` needs no second read of the files.
    entries_crc: u32,
    data_crc: u32,
    stats: ChunkStats,
}

impl ChunkWriter {
    /// Creates `<dir>/<name>.index` and `<dir>/<name>.data`.
    pub fn create(dir: &Path, name: &str) -> Result<Self, FormatError> {
        let index_path = dir.join(format!("{name}.index"));
        let data_path = dir.join(format!("{name}.data"));
        let mut index = BufWriter::with_capacity(1 << 20, File::create(&index_path).map_err(io(&index_path))?);
        let mut data = BufWriter::with_capacity(1 << 20, File::create(&data_path).map_err(io(&data_path))?);
        index.write_all(&index_header(0)).map_err(io(&index_path))?;
        let mut d = [0u8; DATA_HEADER_BYTES];
        d[..8].copy_from_slice(DATA_MAGIC);
        d[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        data.write_all(&d).map_err(io(&data_path))?;
        let data_crc = crc32c::crc32c(&d);
        Ok(Self {
            name: name.to_string(),
            index_path,
            data_path,
            index,
            data,
            data_pos: DATA_HEADER_BYTES as u64,
            group: None,
            group_count: 0,
            group_bytes: Vec::new(),
            last_key: Vec::new(),
            entries_crc: 0,
            data_crc,
            stats: ChunkStats::default(),
        })
    }

    /// The chunk's file stem (`<partition>_<replica>_<chunk>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds a tuple. Tuples must come sorted by prefix, then by key; the
    /// same key twice is an error.
    pub fn push(&mut self, prefix: u64, key: &[u8], value: &[u8]) -> Result<(), FormatError> {
        if key.len() > u32::MAX as usize || value.len() > u32::MAX as usize {
            return Err(FormatError::Order(format!("key or value of key {key:?} is over 4 GiB")));
        }
        match self.group {
            Some(p) if p == prefix => match self.last_key.as_slice().cmp(key) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => return Err(FormatError::DuplicateKey(key.to_vec())),
                std::cmp::Ordering::Greater => return Err(FormatError::Order(format!("key {key:?} after {:?} under one prefix", self.last_key))),
            },
            Some(p) if p > prefix => return Err(FormatError::Order(format!("prefix {prefix:016x} after {p:016x}"))),
            _ => {
                self.flush_group()?;
                self.group = Some(prefix);
            }
        }
        self.group_count += 1;
        self.group_bytes.extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.group_bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.group_bytes.extend_from_slice(key);
        self.group_bytes.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.stats.records += 1;
        Ok(())
    }

    fn flush_group(&mut self) -> Result<(), FormatError> {
        let Some(prefix) = self.group.take() else { return Ok(()) };
        let mut entry = [0u8; ENTRY_BYTES];
        entry[..8].copy_from_slice(&prefix.to_be_bytes());
        entry[8..].copy_from_slice(&self.data_pos.to_le_bytes());
        self.index.write_all(&entry).map_err(io(&self.index_path))?;
        self.entries_crc = crc32c::crc32c_append(self.entries_crc, &entry);
        let dp = &self.data_path;
        let count = self.group_count.to_le_bytes();
        self.data.write_all(&count).map_err(io(dp))?;
        self.data.write_all(&self.group_bytes).map_err(io(dp))?;
        self.data_crc = crc32c::crc32c_append(crc32c::crc32c_append(self.data_crc, &count), &self.group_bytes);
        self.data_pos += 4 + self.group_bytes.len() as u64;
        self.stats.entries += 1;
        if self.group_count > 1 {
            self.stats.collided_prefixes += 1;
        }
        self.group_count = 0;
        self.group_bytes.clear();
        Ok(())
    }

    /// Writes the last group, the entry count, and fsyncs both files.
    pub fn finish(mut self) -> Result<ChunkStats, FormatError> {
        use std::io::{Seek, SeekFrom};
        self.flush_group()?;
        let mut index = self.index.into_inner().map_err(|e| FormatError::Io { path: self.index_path.clone(), source: e.into_error() })?;
        index.seek(SeekFrom::Start(16)).map_err(io(&self.index_path))?;
        index.write_all(&self.stats.entries.to_le_bytes()).map_err(io(&self.index_path))?;
        let header = index_header(self.stats.entries);
        let entries_len = self.stats.entries as usize * ENTRY_BYTES;
        self.stats.index_crc32c = crc32c::crc32c_combine(crc32c::crc32c(&header), self.entries_crc, entries_len);
        self.stats.data_crc32c = self.data_crc;
        index.sync_all().map_err(io(&self.index_path))?;
        let data = self.data.into_inner().map_err(|e| FormatError::Io { path: self.data_path.clone(), source: e.into_error() })?;
        data.sync_all().map_err(io(&self.data_path))?;
        self.stats.index_bytes = (INDEX_HEADER_BYTES as u64) + self.stats.entries * ENTRY_BYTES as u64;
        self.stats.data_bytes = self.data_pos;
        Ok(self.stats)
    }
}

/// How a lookup searches the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Search {
    /// Binary search: O(log n) probes.
    #[default]
    Binary,
    /// Interpolation search (Spock §4.2.2): MD5 prefixes are uniform, so
    /// O(log log n) probes, which matters when the index is not cached.
    Interpolation,
}

/// A chunk mapped into memory.
pub struct ChunkReader {
    index: memmap2::Mmap,
    data: memmap2::Mmap,
    entries: usize,
    data_path: PathBuf,
}

fn map(path: &Path) -> Result<memmap2::Mmap, FormatError> {
    let f = File::open(path).map_err(io(path))?;
    // SAFETY: chunk files are immutable once their version is built; the
    // store never writes or truncates a file it serves.
    unsafe { memmap2::Mmap::map(&f) }.map_err(io(path))
}

/// `n` bytes of `d` at `o`, if they are all there (offsets come from the
/// files, so they may be anything).
fn at(d: &[u8], o: usize, n: usize) -> Option<&[u8]> {
    d.get(o..o.checked_add(n)?)
}

impl ChunkReader {
    /// Maps a chunk and checks its headers and sizes.
    pub fn open(index_path: &Path, data_path: &Path) -> Result<Self, FormatError> {
        let corrupt = |path: &Path, detail: String| FormatError::Corrupt { path: path.to_path_buf(), detail };
        let index = map(index_path)?;
        let data = map(data_path)?;
        if index.len() < INDEX_HEADER_BYTES || &index[..8] != INDEX_MAGIC {
            return Err(corrupt(index_path, "not a chunk index (bad magic or truncated header)".into()));
        }
        let version = u16::from_le_bytes([index[8], index[9]]);
        if version != FORMAT_VERSION {
            return Err(corrupt(index_path, format!("format version {version}, this build reads {FORMAT_VERSION}")));
        }
        if u16::from_le_bytes([index[10], index[11]]) as usize != ENTRY_BYTES {
            return Err(corrupt(index_path, "entry width is not 16".into()));
        }
        let entries = u64::from_le_bytes(index[16..24].try_into().expect("8 bytes"));
        // Saturating: a corrupt count must fail the size check, not overflow.
        let want = (INDEX_HEADER_BYTES as u64).saturating_add(entries.saturating_mul(ENTRY_BYTES as u64));
        if index.len() as u64 != want {
            return Err(corrupt(index_path, format!("{} bytes for {entries} entries (expected {want})", index.len())));
        }
        if data.len() < DATA_HEADER_BYTES || &data[..8] != DATA_MAGIC {
            return Err(corrupt(data_path, "not a chunk data file (bad magic or truncated header)".into()));
        }
        let version = u16::from_le_bytes([data[8], data[9]]);
        if version != FORMAT_VERSION {
            return Err(corrupt(data_path, format!("format version {version}, this build reads {FORMAT_VERSION}")));
        }
        Ok(Self { index, data, entries: entries as usize, data_path: data_path.to_path_buf() })
    }

    /// Index entries.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// Tuples and collided prefixes, from the group counts.
    pub fn stats(&self) -> Result<(u64, u64), FormatError> {
        let (mut records, mut collided) = (0u64, 0u64);
        for i in 0..self.entries {
            let o = self.offset_at(i) as usize;
            let count = at(&self.data, o, 4)
                .ok_or_else(|| FormatError::Corrupt { path: self.data_path.clone(), detail: format!("index entry {i} points past the data ({o})") })?;
            let n = u32::from_le_bytes([count[0], count[1], count[2], count[3]]);
            records += u64::from(n);
            collided += u64::from(n > 1);
        }
        Ok((records, collided))
    }

    fn prefix_at(&self, i: usize) -> u64 {
        let o = INDEX_HEADER_BYTES + i * ENTRY_BYTES;
        u64::from_be_bytes(self.index[o..o + 8].try_into().expect("8 bytes"))
    }

    fn offset_at(&self, i: usize) -> u64 {
        let o = INDEX_HEADER_BYTES + i * ENTRY_BYTES + 8;
        u64::from_le_bytes(self.index[o..o + 8].try_into().expect("8 bytes"))
    }

    /// Position of `prefix` in the index.
    fn find(&self, prefix: u64, search: Search) -> Option<usize> {
        let (mut lo, mut hi) = (0usize, self.entries);
        if search == Search::Interpolation {
            // Interpolate while the range is large, then finish binary.
            let mut rounds = 0;
            while hi - lo > 16 && rounds < 8 {
                let (a, b) = (self.prefix_at(lo), self.prefix_at(hi - 1));
                if prefix < a || prefix > b {
                    return None;
                }
                let span = (b - a) as u128;
                let guess = lo + ((prefix - a) as u128 * (hi - 1 - lo) as u128).checked_div(span).unwrap_or(0) as usize;
                let p = self.prefix_at(guess);
                match p.cmp(&prefix) {
                    std::cmp::Ordering::Equal => return Some(guess),
                    std::cmp::Ordering::Less => lo = guess + 1,
                    std::cmp::Ordering::Greater => hi = guess,
                }
                rounds += 1;
            }
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.prefix_at(mid).cmp(&prefix) {
                std::cmp::Ordering::Equal => return Some(mid),
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
            }
        }
        None
    }

    /// The value of `key` (whose digest prefix is `prefix`), a slice of the
    /// mapped data file.
    pub fn get(&self, prefix: u64, key: &[u8], search: Search) -> Result<Option<&[u8]>, FormatError> {
        let Some(i) = self.find(prefix, search) else { return Ok(None) };
        let corrupt = |detail: String| FormatError::Corrupt { path: self.data_path.clone(), detail };
        let d = &self.data[..];
        let mut o = self.offset_at(i) as usize;
        let read_u32 = |o: usize| -> Result<u32, FormatError> {
            at(d, o, 4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))).ok_or_else(|| corrupt(format!("read past the end at offset {o}")))
        };
        let count = read_u32(o)?;
        o += 4;
        for _ in 0..count {
            let kl = read_u32(o)? as usize;
            let vl = read_u32(o + 4)? as usize;
            let k = at(d, o + 8, kl).ok_or_else(|| corrupt(format!("key overruns the file at offset {o}")))?;
            let v = at(d, o + 8 + kl, vl).ok_or_else(|| corrupt(format!("value overruns the file at offset {o}")))?;
            if k == key {
                return Ok(Some(v));
            }
            o += 8 + kl + vl;
        }
        Ok(None)
    }

    /// Walks every group: prefixes strictly increasing, offsets in order and
    /// in bounds, the data file fully accounted for. For tools and tests;
    /// the `.metadata` checksums are what guard a version going live.
    pub fn check(&self) -> Result<u64, FormatError> {
        let corrupt = |detail: String| FormatError::Corrupt { path: self.data_path.clone(), detail };
        let mut expect = DATA_HEADER_BYTES as u64;
        let mut records = 0u64;
        for i in 0..self.entries {
            if i > 0 && self.prefix_at(i) <= self.prefix_at(i - 1) {
                return Err(corrupt(format!("index entry {i} is out of order")));
            }
            if self.offset_at(i) != expect {
                return Err(corrupt(format!("index entry {i} points at {} instead of {expect}", self.offset_at(i))));
            }
            let o = expect as usize;
            let count = at(&self.data, o, 4).map(|b| u32::from_le_bytes(b.try_into().expect("4"))).ok_or_else(|| corrupt("truncated group".into()))?;
            let mut p = o + 4;
            for _ in 0..count {
                let hdr = at(&self.data, p, 8).ok_or_else(|| corrupt("truncated tuple".into()))?;
                let kl = u32::from_le_bytes(hdr[..4].try_into().expect("4")) as usize;
                let vl = u32::from_le_bytes(hdr[4..].try_into().expect("4")) as usize;
                p += 8 + kl + vl;
                records += 1;
            }
            if p > self.data.len() {
                return Err(corrupt("a tuple overruns the file".into()));
            }
            expect = p as u64;
        }
        if expect != self.data.len() as u64 {
            return Err(corrupt(format!("{} bytes after the last group", self.data.len() as u64 - expect)));
        }
        Ok(records)
    }
}

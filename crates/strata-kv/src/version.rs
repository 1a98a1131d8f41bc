//! A version of a store: a directory of chunk files and its `.metadata`
//! (docs/formats.md, "Read-only store metadata"), which names the store and
//! its ring, counts what the version holds, and lists every chunk file with
//! its size and CRC32C. A version is checked against it, file by file,
//! before it can go live.

use crate::format::{ChunkReader, FormatError};
use crate::placement::KeyHash;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The metadata file's name in a version directory.
pub const METADATA_FILE: &str = ".metadata";
/// Version of the metadata layout.
pub const METADATA_FORMAT: u16 = 1;

/// What defines a store's layout: a version built for another layout cannot
/// serve it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreDef {
    /// Name.
    pub name: String,
    /// Partitions of the ring.
    pub partitions: u32,
    /// Replicas of each key.
    pub replication: u32,
    /// Chunks per (partition, replica) bucket.
    pub chunks: u32,
}

impl StoreDef {
    /// Checks the numbers.
    pub fn validate(&self) -> Result<(), VersionError> {
        let bad = |d: &str| VersionError::Invalid(format!("store {}: {d}", self.name));
        if self.name.is_empty() || !self.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(bad("a name is letters, digits, '-' and '_'"));
        }
        if self.partitions == 0 || self.partitions > 1 << 16 {
            return Err(bad("partitions must be 1..=65536"));
        }
        if self.replication == 0 || self.replication > 16 {
            return Err(bad("replication must be 1..=16"));
        }
        if self.chunks == 0 || self.chunks > 1 << 16 {
            return Err(bad("chunks must be 1..=65536"));
        }
        Ok(())
    }

    /// The file stem of a chunk.
    pub fn chunk_name(partition: u32, replica: u32, chunk: u32) -> String {
        format!("{partition}_{replica}_{chunk}")
    }
}

/// What one node's version of a store holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// The node, for a store spread over a ring; `None` for a store built
    /// for a single node.
    pub node: Option<u32>,
    /// The checksum of the ring's replica table (`ring_checksum`).
    pub ring: Option<u32>,
    /// The (partition, replica) buckets held.
    pub buckets: BTreeSet<(u32, u32)>,
}

impl Layout {
    /// A single-node store: replica 0 of every partition.
    pub fn single(store: &StoreDef) -> Self {
        Self { node: None, ring: None, buckets: (0..store.partitions).map(|p| (p, 0)).collect() }
    }

    /// Node `node`'s share of a ring: every (partition, replica) the replica
    /// table (each primary partition's nodes in replica order) gives it.
    pub fn for_node(table: &[Vec<u32>], node: u32) -> Self {
        let buckets = table
            .iter()
            .enumerate()
            .flat_map(|(p, nodes)| nodes.iter().enumerate().filter(move |(_, n)| **n == node).map(move |(r, _)| (p as u32, r as u32)))
            .collect();
        Self { node: Some(node), ring: Some(ring_checksum(table)), buckets }
    }
}

/// CRC32C of a replica table: the partition count, then for each partition
/// its node count and nodes, all u32 little-endian. Builders stamp it into
/// every node's `.metadata`; a node refuses a version built for another.
pub fn ring_checksum(table: &[Vec<u32>]) -> u32 {
    let mut crc = crc32c::crc32c(&(table.len() as u32).to_le_bytes());
    for nodes in table {
        crc = crc32c::crc32c_append(crc, &(nodes.len() as u32).to_le_bytes());
        for n in nodes {
            crc = crc32c::crc32c_append(crc, &n.to_le_bytes());
        }
    }
    crc
}

/// One chunk file as the metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSum {
    /// File name.
    pub name: String,
    /// Size.
    pub bytes: u64,
    /// CRC32C of its bytes.
    pub crc32c: u32,
}

/// The `.metadata` of a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// Layout version of this file and of the chunk files.
    pub format: u16,
    /// The store and ring the version was built for.
    pub store: StoreDef,
    /// Key digest (`md5`).
    pub hash: String,
    /// The node this version is for, in a store spread over a ring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
    /// The checksum of the ring's replica table it was built for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring: Option<u32>,
    /// Tuples in all chunks.
    pub records: u64,
    /// Digest prefixes shared by more than one key.
    pub collided_prefixes: u64,
    /// Every chunk file, sorted by name.
    pub files: Vec<FileSum>,
    /// CRC32C over the list: each file's name, size and CRC in order.
    pub checksum: u32,
}

/// Why a version cannot go live.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// A chunk file is damaged.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// I/O.
    #[error("{path}: {source}")]
    Io {
        /// File.
        path: PathBuf,
        /// Error.
        source: std::io::Error,
    },
    /// The metadata or the files disagree, or the version does not fit the store.
    #[error("{0}")]
    Invalid(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VersionError + '_ {
    move |source| VersionError::Io { path: path.to_path_buf(), source }
}

fn list_checksum(files: &[FileSum]) -> u32 {
    let mut crc = 0u32;
    for f in files {
        crc = crc32c::crc32c_append(crc, f.name.as_bytes());
        crc = crc32c::crc32c_append(crc, &f.bytes.to_le_bytes());
        crc = crc32c::crc32c_append(crc, &f.crc32c.to_le_bytes());
    }
    crc
}

/// Size and CRC32C of a file.
pub fn sum_file(path: &Path) -> Result<(u64, u32), VersionError> {
    let mut f = std::fs::File::open(path).map_err(io(path))?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut crc, mut n) = (0u32, 0u64);
    loop {
        let k = f.read(&mut buf).map_err(io(path))?;
        if k == 0 {
            return Ok((n, crc));
        }
        crc = crc32c::crc32c_append(crc, &buf[..k]);
        n += k as u64;
    }
}

impl Metadata {
    /// Writes `.metadata` (fsync'd) for the chunk files in `dir`, whose
    /// sizes and CRCs the writer computed while writing them.
    pub fn write(
        dir: &Path,
        store: &StoreDef,
        layout: &Layout,
        records: u64,
        collided_prefixes: u64,
        mut files: Vec<FileSum>,
    ) -> Result<Metadata, VersionError> {
        files.sort_by(|a, b| a.name.cmp(&b.name));
        let checksum = list_checksum(&files);
        let m = Metadata {
            format: METADATA_FORMAT,
            store: store.clone(),
            hash: "md5".into(),
            node: layout.node,
            ring: layout.ring,
            records,
            collided_prefixes,
            files,
            checksum,
        };
        let path = dir.join(METADATA_FILE);
        let tmp = dir.join(".metadata.tmp");
        let mut text = serde_json::to_vec(&m).map_err(|e| VersionError::Invalid(e.to_string()))?;
        text.push(b'\n');
        // Atomic: a live version's metadata is rewritten when its node's share changes.
        std::fs::write(&tmp, &text).map_err(io(&tmp))?;
        std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(io(&tmp))?;
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        std::fs::File::open(dir).and_then(|f| f.sync_all()).map_err(io(dir))?;
        Ok(m)
    }

    /// Reads `.metadata` and checks it against the files, against `store`
    /// and against `layout`: the same ring and node, every chunk file of
    /// the layout's buckets present, sizes and CRCs matching, no stray
    /// chunk files.
    pub fn verify(dir: &Path, store: &StoreDef, layout: &Layout) -> Result<Metadata, VersionError> {
        let path = dir.join(METADATA_FILE);
        let text = std::fs::read(&path).map_err(io(&path))?;
        let m = Self::parse(&text, &path)?;
        m.fits(dir, store, layout)?;
        m.check_files(dir)?;
        Ok(m)
    }

    /// Parses `.metadata` bytes (`path` for messages).
    pub fn parse(text: &[u8], path: &Path) -> Result<Self, VersionError> {
        serde_json::from_slice(text).map_err(|e| VersionError::Invalid(format!("{}: not valid metadata: {e}", path.display())))
    }

    /// Checks the metadata against a store and layout, without reading
    /// the chunk files: format, hash, store definition, node and ring, the
    /// list's checksum, and every file of the layout's buckets listed and
    /// nothing else.
    pub fn fits(&self, dir: &Path, store: &StoreDef, layout: &Layout) -> Result<(), VersionError> {
        let m = self;
        let path = dir.join(METADATA_FILE);
        if m.format != METADATA_FORMAT {
            return Err(VersionError::Invalid(format!("{}: format {} (this build reads {METADATA_FORMAT})", path.display(), m.format)));
        }
        if m.hash != "md5" {
            return Err(VersionError::Invalid(format!("{}: hash {:?}, only md5 is served", path.display(), m.hash)));
        }
        if m.store != *store {
            return Err(VersionError::Invalid(format!(
                "{}: built for store {:?} with {} partitions, {} replicas, {} chunks; the store is {:?} with {}, {}, {}",
                dir.display(),
                m.store.name,
                m.store.partitions,
                m.store.replication,
                m.store.chunks,
                store.name,
                store.partitions,
                store.replication,
                store.chunks
            )));
        }
        if (m.node, m.ring) != (layout.node, layout.ring) {
            let show = |node: Option<u32>, ring: Option<u32>| match (node, ring) {
                (Some(n), Some(r)) => format!("node {n} of ring {r:#010x}"),
                _ => "a single node".to_string(),
            };
            return Err(VersionError::Invalid(format!(
                "{}: built for {}, this store wants {} (a different ring or node)",
                dir.display(),
                show(m.node, m.ring),
                show(layout.node, layout.ring)
            )));
        }
        if list_checksum(&m.files) != m.checksum {
            return Err(VersionError::Invalid(format!("{}: the file list's checksum does not match", path.display())));
        }
        let listed: HashMap<&str, &FileSum> = m.files.iter().map(|f| (f.name.as_str(), f)).collect();
        for &(p, r) in &layout.buckets {
            for c in 0..store.chunks {
                for ext in ["index", "data"] {
                    let name = format!("{}.{ext}", StoreDef::chunk_name(p, r, c));
                    if !listed.contains_key(name.as_str()) {
                        return Err(VersionError::Invalid(format!("{}: chunk file {name} is missing from the metadata", dir.display())));
                    }
                }
            }
        }
        if m.files.len() != layout.buckets.len() * store.chunks as usize * 2 {
            return Err(VersionError::Invalid(format!(
                "{}: the metadata lists {} chunk files, the layout has {}",
                dir.display(),
                m.files.len(),
                layout.buckets.len() * store.chunks as usize * 2
            )));
        }
        Ok(())
    }

    /// Checks the chunk files in `dir`: each listed file has its size and
    /// CRC32C, and no unlisted chunk file is present.
    pub fn check_files(&self, dir: &Path) -> Result<(), VersionError> {
        self.check_files_with(dir, true)
    }

    /// As `check_files`; without `crcs`, sizes only (for a version whose
    /// CRCs were checked as it was copied in).
    pub fn check_files_with(&self, dir: &Path, crcs: bool) -> Result<(), VersionError> {
        let m = self;
        let listed: HashMap<&str, &FileSum> = m.files.iter().map(|f| (f.name.as_str(), f)).collect();
        for f in &m.files {
            let p = dir.join(&f.name);
            let missing = |e: VersionError| match e {
                VersionError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    VersionError::Invalid(format!("{}: chunk file is missing", p.display()))
                }
                e => e,
            };
            let (bytes, crc) = if crcs { sum_file(&p).map_err(missing)? } else { (std::fs::metadata(&p).map_err(io(&p)).map_err(missing)?.len(), f.crc32c) };
            if bytes != f.bytes {
                return Err(VersionError::Invalid(format!("{}: {bytes} bytes, the metadata says {} (truncated or replaced)", p.display(), f.bytes)));
            }
            if crc != f.crc32c {
                return Err(VersionError::Invalid(format!("{}: checksum {crc:#010x}, the metadata says {:#010x} (corrupt)", p.display(), f.crc32c)));
            }
        }
        for e in std::fs::read_dir(dir).map_err(io(dir))? {
            let name = e.map_err(io(dir))?.file_name().to_string_lossy().into_owned();
            if (name.ends_with(".index") || name.ends_with(".data")) && !listed.contains_key(name.as_str()) {
                return Err(VersionError::Invalid(format!("{}: chunk file {name} is not in the metadata", dir.display())));
            }
        }
        Ok(())
    }
}

/// A verified version, mapped and ready to serve.
pub struct Version {
    /// Its number.
    pub number: u64,
    /// Its directory.
    pub dir: PathBuf,
    /// Its metadata.
    pub meta: Metadata,
    chunks: HashMap<(u32, u32), ChunkReader>,
}

impl Version {
    /// Verifies `dir` against `store` and `layout` and maps every chunk of
    /// the layout's buckets.
    pub fn open(number: u64, dir: &Path, store: &StoreDef, layout: &Layout) -> Result<Self, VersionError> {
        Self::open_checked(number, dir, store, layout, true)
    }

    /// As `open`; without `crcs`, the files' sizes are checked but not
    /// re-read (their CRCs were checked as they were copied in), so opening
    /// takes milliseconds whatever the version's size.
    pub fn open_checked(number: u64, dir: &Path, store: &StoreDef, layout: &Layout, crcs: bool) -> Result<Self, VersionError> {
        let path = dir.join(METADATA_FILE);
        let meta = Metadata::parse(&std::fs::read(&path).map_err(io(&path))?, &path)?;
        meta.fits(dir, store, layout)?;
        meta.check_files_with(dir, crcs)?;
        let mut chunks = HashMap::new();
        for &(p, r) in &layout.buckets {
            for c in 0..store.chunks {
                let stem = StoreDef::chunk_name(p, r, c);
                let reader = ChunkReader::open(&dir.join(format!("{stem}.index")), &dir.join(format!("{stem}.data")))?;
                // A node holds at most one replica of a partition.
                chunks.insert((p, c), reader);
            }
        }
        Ok(Self { number, dir: dir.to_path_buf(), meta, chunks })
    }

    /// Whether this version holds `key`'s partition (on a ring, a node
    /// holds only its share).
    pub fn holds(&self, key: &[u8]) -> bool {
        self.chunk(&crate::placement::Md5Hash.digest(key)).is_some()
    }

    fn chunk(&self, d: &[u8; 16]) -> Option<&ChunkReader> {
        use crate::placement::{chunk_of, partition_of};
        let s = &self.meta.store;
        self.chunks.get(&(partition_of(d, s.partitions), chunk_of(d, s.chunks)))
    }

    /// `key` looked up with one digest: its value, absent, or in a
    /// partition this version does not hold.
    pub fn lookup(&self, key: &[u8], search: crate::Search) -> Result<Lookup<'_>, FormatError> {
        let d = crate::placement::Md5Hash.digest(key);
        let Some(r) = self.chunk(&d) else { return Ok(Lookup::NotHeld) };
        Ok(match r.get(crate::placement::prefix(&d), key, search)? {
            Some(v) => Lookup::Found(v),
            None => Lookup::Missing,
        })
    }

    /// The value of `key` (`None` also when the partition is not held:
    /// `lookup` tells the two apart).
    pub fn get(&self, key: &[u8], search: crate::Search) -> Result<Option<&[u8]>, FormatError> {
        Ok(match self.lookup(key, search)? {
            Lookup::Found(v) => Some(v),
            Lookup::Missing | Lookup::NotHeld => None,
        })
    }
}

/// What a lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// The value, read in place from the map.
    Found(&'a [u8]),
    /// The partition is held; the key is not in it.
    Missing,
    /// This version does not hold the key's partition (a node's share of a ring).
    NotHeld,
}

/// A store's layout over a ring, as builders take it (`ring.json`, written
/// by `strata kv ring export|plan`, read by `strata kv build --ring` and the
/// Spark job): the store definition, and each primary partition's nodes in
/// replica order, with their checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingFile {
    /// Layout version (1).
    pub format: u16,
    /// The store; `partitions` is the table's length, `replication` its width.
    pub store: StoreDef,
    /// `ring_checksum(table)`.
    pub ring: u32,
    /// Each primary partition's nodes in replica order.
    pub table: Vec<Vec<u32>>,
}

impl RingFile {
    /// The ring file of `store` laid out by `table`.
    pub fn new(store: StoreDef, table: Vec<Vec<u32>>) -> Self {
        Self { format: 1, ring: ring_checksum(&table), store, table }
    }

    /// Reads and checks a ring file.
    pub fn read(path: &Path) -> Result<Self, VersionError> {
        let text = std::fs::read(path).map_err(io(path))?;
        let r: Self = serde_json::from_slice(&text).map_err(|e| VersionError::Invalid(format!("{}: not a ring file: {e}", path.display())))?;
        let bad = |d: String| VersionError::Invalid(format!("{}: {d}", path.display()));
        if r.format != 1 {
            return Err(bad(format!("ring file format {} (this build reads 1)", r.format)));
        }
        r.store.validate()?;
        if r.table.len() != r.store.partitions as usize || r.table.iter().any(|row| row.len() != r.store.replication as usize) {
            return Err(bad(format!("the table is not {} partitions of {} replicas", r.store.partitions, r.store.replication)));
        }
        if ring_checksum(&r.table) != r.ring {
            return Err(bad("the table's checksum does not match".into()));
        }
        Ok(r)
    }

    /// Writes the file.
    pub fn write(&self, path: &Path) -> Result<(), VersionError> {
        let mut text = serde_json::to_vec_pretty(self).map_err(|e| VersionError::Invalid(e.to_string()))?;
        text.push(b'\n');
        std::fs::write(path, text).map_err(io(path))
    }
}

//! Building a version from records: every key filed into its (partition,
//! chunk) bucket, each bucket sorted by (digest prefix, key) and written as
//! a chunk, then the `.metadata`. The output depends only on the records
//! and the store definition, never on input order or thread timing: the
//! Spark builder of part 2 must produce the same bytes.

use crate::format::{ChunkWriter, FormatError};
use crate::placement::{KeyHash, Md5Hash, chunk_of, partition_of, prefix};
use crate::version::{Metadata, StoreDef, VersionError};
use std::path::Path;

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
}

/// A record on its way to a chunk: digest prefix, key, value, input position.
type Tuple = (u64, Vec<u8>, Vec<u8>, u64);

/// Builds a version of `store` in `out` (created, must be empty) from
/// `records`, held in memory.
pub fn build_in_memory(
    store: &StoreDef,
    records: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
    out: &Path,
    duplicates: Duplicates,
) -> Result<BuildReport, VersionError> {
    store.validate()?;
    std::fs::create_dir_all(out).map_err(|source| VersionError::Io { path: out.to_path_buf(), source })?;
    let buckets = store.partitions as usize * store.chunks as usize;
    let mut by_bucket: Vec<Vec<Tuple>> = vec![Vec::new(); buckets];
    let mut report = BuildReport::default();
    for (seq, (k, v)) in records.into_iter().enumerate() {
        let d = Md5Hash.digest(&k);
        let b = partition_of(&d, store.partitions) as usize * store.chunks as usize + chunk_of(&d, store.chunks) as usize;
        report.input_bytes += (k.len() + v.len()) as u64;
        by_bucket[b].push((prefix(&d), k, v, seq as u64));
    }
    for (b, mut tuples) in by_bucket.into_iter().enumerate() {
        // Sort by (prefix, key); for equal keys the later record last.
        tuples.sort_unstable_by(|a, b| (a.0, &a.1, a.3).cmp(&(b.0, &b.1, b.3)));
        let (p, c) = ((b / store.chunks as usize) as u32, (b % store.chunks as usize) as u32);
        let mut w = ChunkWriter::create(out, &StoreDef::chunk_name(p, 0, c))?;
        let mut i = 0;
        while i < tuples.len() {
            let mut j = i;
            while j + 1 < tuples.len() && tuples[j + 1].0 == tuples[i].0 && tuples[j + 1].1 == tuples[i].1 {
                j += 1;
            }
            if j > i {
                match duplicates {
                    Duplicates::Fail => return Err(FormatError::DuplicateKey(tuples[i].1.clone()).into()),
                    Duplicates::LastWins => report.duplicates_dropped += (j - i) as u64,
                }
            }
            let (pre, k, v, _) = &tuples[j];
            w.push(*pre, k, v)?;
            i = j + 1;
        }
        let stats = w.finish()?;
        report.records += stats.records;
        report.collided_prefixes += stats.collided_prefixes;
        report.output_bytes += stats.index_bytes + stats.data_bytes;
    }
    Metadata::write(out, store, report.records, report.collided_prefixes)?;
    Ok(report)
}

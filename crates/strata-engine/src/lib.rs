//! The Strata storage engine: one data directory (a disk) holding many
//! partition replicas, each an append-only log of records (Ambry §2.2, §4.3).
//!
//! Owns: log segments, the segmented index with Bloom filters, the journal,
//! group commit, recovery and compaction; versioned records (`versions.rs`:
//! newest, floor and all-versions lookups, per-kind retention, reclaimed
//! tombstones) for FDS tracts, Týr chunk versions and read-write store
//! values. Keys are tagged ([`strata_types::Key`]).
//! Must not depend on: the router, the cluster map, RPC, HTTP or any async runtime
//! (only `tokio::sync::oneshot`, which needs no runtime, to hand back completions).
//!
//! Durability order: a record is fdatasync'd before it enters the index or is
//! acknowledged; an index file is written only for bytes already durable; a
//! compacted generation is durable before the compaction log commits it.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-fs; never the router, the cluster map, RPC, or an
//! HTTP crate.

mod cache;
mod compaction;
mod config;
mod damage;
mod direct;
mod error;
pub mod fsutil;
mod index;
mod journal;
mod recovery;
mod replica;
mod segment;
mod tail;
mod verify;
mod versions;
mod writer;

pub use compaction::{COMPACTION_LOG, CompactionReport};
pub use config::{EngineConfig, FlushPolicy};
pub use damage::DAMAGE_FILE;
pub use error::{EngineError, ReadOnlyReason, Result};
pub use index::{KeyState, Located};
pub use journal::JournalEntry;
pub use replica::{BlobRecord, PendingWrite, Replica, ReplicaStats, ReplicaStatus, WriteAck, WriteOp};
pub use segment::FileRange;
pub use strata_format::{CompactionPhase, DamagedRange};
pub use tail::TailStats;
pub use verify::{DigestState, KeyDigest, Verified};
pub use versions::Retention;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use strata_types::{Clock, PartitionId};

/// One data directory and the partition replicas in it.
pub struct Store {
    dir: PathBuf,
    config: EngineConfig,
    clock: Arc<dyn Clock>,
    cache: Arc<cache::WriteCache>,
    replicas: RwLock<BTreeMap<PartitionId, Arc<Replica>>>,
}

impl Store {
    /// Opens (creating if needed) a data directory and every replica in it.
    pub fn open(dir: &Path, config: EngineConfig, clock: Arc<dyn Clock>) -> Result<Self> {
        let header = strata_format::headers::SEGMENT_HEADER_BYTES as u64;
        if config.record_bytes_max + header > config.segment_bytes {
            return Err(EngineError::Invalid(format!(
                "segment size {} must exceed the largest record {} plus its {header}-byte header",
                config.segment_bytes, config.record_bytes_max
            )));
        }
        let parts = dir.join("partitions");
        std::fs::create_dir_all(&parts).map_err(error::io(format!("create {}", parts.display())))?;
        let mut config = config;
        if let Some(fraction) = config.disk_reserve_fraction {
            let share = (fsutil::total_bytes(dir)? as f64 * fraction) as u64;
            config.disk_reserve_bytes = config.disk_reserve_bytes.min(share);
            config.disk_reserve_fraction = None;
            tracing::debug!(dir = %dir.display(), reserve_bytes = config.disk_reserve_bytes, "disk reserve");
        }
        let cache = cache::WriteCache::new(&config);
        let mut replicas = BTreeMap::new();
        for entry in std::fs::read_dir(&parts).map_err(error::io(format!("list {}", parts.display())))? {
            let entry = entry.map_err(error::io("list partitions"))?;
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<PartitionId>().ok()) else { continue };
            if !entry.path().join(recovery::META_FILE).exists() {
                // Creation never finished: nothing in it was ever acknowledged.
                tracing::warn!(partition = pid, "removing a partially created replica");
                std::fs::remove_dir_all(entry.path()).map_err(error::io("remove partial replica"))?;
                continue;
            }
            let r = recovery::open(&entry.path(), config.clone(), clock.clone(), cache.clone())?;
            replicas.insert(pid, Arc::new(r));
        }
        Ok(Self { dir: dir.to_owned(), config, clock, cache, replicas: RwLock::new(replicas) })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The engine configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Size and occupancy of the tail cache (`None` when it is off).
    pub fn tail_cache_stats(&self) -> Option<TailStats> {
        self.cache.tail.as_ref().map(|t| t.stats())
    }

    /// Creates a new empty replica of `partition`.
    pub fn create_replica(&self, partition: PartitionId) -> Result<Arc<Replica>> {
        let mut map = self.replicas.write().unwrap_or_else(|p| p.into_inner());
        if map.contains_key(&partition) {
            return Err(EngineError::Invalid(format!("partition {partition} already has a replica here")));
        }
        let dir = self.dir.join("partitions").join(format!("{partition:08}"));
        recovery::create(&dir, partition, self.config.replica_capacity_bytes, self.clock.as_ref())?;
        let r = Arc::new(recovery::open(&dir, self.config.clone(), self.clock.clone(), self.cache.clone())?);
        map.insert(partition, r.clone());
        Ok(r)
    }

    /// Drops this store's replica of `partition` and deletes its files
    /// (the map moved it elsewhere): the replica is closed, its metadata
    /// file removed and the directory fsync'd first, so a crash part-way
    /// leaves a replica that [`Store::open`] takes for never created and
    /// removes. Returns false if there was none.
    pub fn drop_replica(&self, partition: PartitionId) -> Result<bool> {
        let Some(r) = self.replicas.write().unwrap_or_else(|p| p.into_inner()).remove(&partition) else { return Ok(false) };
        r.close();
        let dir = r.dir().to_owned();
        drop(r);
        let meta = dir.join(recovery::META_FILE);
        match std::fs::remove_file(&meta) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(error::io(format!("remove {}", meta.display()))(e)),
        }
        fsutil::fsync_dir(&dir)?;
        std::fs::remove_dir_all(&dir).map_err(error::io(format!("remove {}", dir.display())))?;
        fsutil::fsync_dir(&self.dir.join("partitions"))?;
        Ok(true)
    }

    /// The replica of `partition`, if this store has one.
    pub fn replica(&self, partition: PartitionId) -> Option<Arc<Replica>> {
        self.replicas.read().unwrap_or_else(|p| p.into_inner()).get(&partition).cloned()
    }

    /// Every replica, by partition id.
    pub fn replicas(&self) -> Vec<Arc<Replica>> {
        self.replicas.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// Runs a compaction pass over every replica.
    pub fn compact_all(&self, force: bool) -> Result<CompactionReport> {
        let mut total = CompactionReport::default();
        for r in self.replicas() {
            let rep = r.compact(force)?;
            total.segments_compacted += rep.segments_compacted;
            total.bytes_reclaimed += rep.bytes_reclaimed;
        }
        Ok(total)
    }

    /// Re-evaluates every replica's read-only state.
    pub fn refresh_read_only(&self) {
        for r in self.replicas() {
            r.refresh_read_only();
        }
    }

    /// Closes every replica (draining queued writes).
    pub fn close(&self) {
        for r in self.replicas() {
            r.close();
        }
    }
}

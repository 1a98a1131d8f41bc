//! Tunables of the storage engine, each with its unit and reason.

/// When a write is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPolicy {
    /// One fdatasync per group-commit batch before any write in it is
    /// acknowledged. The default: an acknowledged write survives power loss.
    EveryBatch,
    /// Never fsync on the write path (the OS writes back on its own schedule).
    /// Trades durability on power loss for latency; a process crash loses nothing.
    Never,
}

/// Engine configuration, shared by every replica of a store.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Largest size of one log segment file; the whole segment is mapped, so
    /// this is also the virtual address space one segment takes.
    pub segment_bytes: u64,
    /// Memtable entries after which the in-memory index segment is persisted.
    pub index_flush_entries: usize,
    /// Recent records kept in the in-memory journal for replication.
    pub journal_entries: usize,
    /// Most bytes one group-commit batch writes before its fsync.
    pub batch_bytes_max: usize,
    /// Most records in one group-commit batch.
    pub batch_records_max: usize,
    /// Bytes of writes that may wait for the writer before new ones are
    /// refused as busy (bounds memory under overload).
    pub queue_bytes_max: u64,
    /// Durability of the write path.
    pub flush: FlushPolicy,
    /// Capacity of one replica in bytes of log.
    pub replica_capacity_bytes: u64,
    /// Fraction of capacity after which a replica turns read-only (Ambry: 0.85).
    pub read_only_fraction: f64,
    /// Free bytes the filesystem must keep; below it puts are refused
    /// (deletes still go through) instead of hitting ENOSPC mid-record.
    /// Compaction may use this room: it is how a full disk is emptied.
    pub disk_reserve_bytes: u64,
    /// When set, the reserve is at most this share of the filesystem's
    /// size, so a small disk is not reserved whole (a 256 MiB reserve
    /// refused every put on a 64 MiB disk). Applied when the store opens.
    pub disk_reserve_fraction: Option<f64>,
    /// Largest record (one blob or chunk plus its properties) accepted.
    pub record_bytes_max: u64,
    /// Fraction of a sealed segment that must be reclaimable before the
    /// background compactor rewrites it.
    pub compaction_reclaim_fraction: f64,
    /// An expired blob is only dropped by compaction once it has been expired
    /// this long, so a TTL update accepted just before expiry cannot race it.
    pub compaction_expiry_grace_ms: u64,
    /// Verify the CRC of a whole record (data included) on every get.
    pub verify_crc_on_read: bool,
    /// Bytes of recently written log the store keeps in the page cache;
    /// older durable ranges are dropped from it (see `cache.rs`). 0 leaves
    /// the page cache to the kernel alone.
    pub write_cache_bytes: u64,
    /// Bytes of buffers for reading large records that are not in the page
    /// cache with `O_DIRECT` (see `direct.rs`); 0 reads them through the
    /// page cache like every other record.
    pub cold_read_buffer_bytes: u64,
    /// Bytes of memory through which large writes go to the log with
    /// `O_DIRECT` and from which recent large records are read (see
    /// `tail.rs`); 0 writes everything through the page cache.
    pub tail_cache_bytes: u64,
    /// Fault the tail cache in at start, on a thread that runs only when a
    /// CPU is idle, so the first writes through it find it ready.
    pub tail_cache_prefault: bool,
    /// Fault injection for tests: while set, every append fails as an I/O
    /// error would (after the bytes are written, before they are durable).
    #[doc(hidden)]
    pub fail_appends: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 512 << 20,
            index_flush_entries: 100_000,
            journal_entries: 65_536,
            batch_bytes_max: 32 << 20,
            batch_records_max: 1024,
            queue_bytes_max: 256 << 20,
            flush: FlushPolicy::EveryBatch,
            replica_capacity_bytes: 64 << 30,
            read_only_fraction: 0.85,
            disk_reserve_bytes: 256 << 20,
            disk_reserve_fraction: Some(0.05),
            record_bytes_max: 64 << 20,
            compaction_reclaim_fraction: 0.25,
            compaction_expiry_grace_ms: 10 * 60 * 1000,
            verify_crc_on_read: true,
            write_cache_bytes: 1 << 30,
            cold_read_buffer_bytes: 256 << 20,
            tail_cache_bytes: 64 << 20,
            tail_cache_prefault: false,
            fail_appends: None,
        }
    }
}

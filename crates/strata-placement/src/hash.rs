//! Deterministic 64-bit hashing of placement keys. Each Kinesis segment uses
//! an independent function: the same algorithm with a different seed.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Seed of segment 0; segment `s` uses `SEGMENT_SEED_BASE + s`. Part of the
/// placement contract: changing it moves every object.
pub const SEGMENT_SEED_BASE: u64 = 0x4b49_4e45_5349_5300;

/// The hash of `key` under segment `segment`'s function.
pub fn segment_hash(key: &[u8], segment: usize) -> u64 {
    xxh3_64_with_seed(key, SEGMENT_SEED_BASE.wrapping_add(segment as u64))
}

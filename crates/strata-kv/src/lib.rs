//! Read-only key-value stores, served the way LinkedIn's Spock/Voldemort
//! read-only stores are (Spock §4): data sets are built offline into
//! sorted, immutable chunk files, shipped, and swapped in whole.
//!
//! - [`format`]: the chunk files (`.index`: sorted MD5 prefixes and data
//!   offsets; `.data`: collided tuples with their raw keys), written from
//!   sorted tuples and read from memory maps.
//! - [`placement`]: which (partition, replica) bucket and chunk a key
//!   belongs to.
//!
//! Files are replaced durably with `strata-fs`.
//!
//! Layer rule (checked by the test command): may use strata-fs,
//! strata-placement, strata-types; never the blob engine, the router, the server, or an
//! HTTP crate.

pub mod build;
pub mod format;
pub mod input;
pub mod latest;
pub mod placement;
pub mod store;
pub mod version;

pub use build::{BuildReport, Builder, Duplicates, build_in_memory, build_with_memory};
pub use format::{ChunkReader, ChunkWriter, FormatError, Search};
pub use latest::{By, Change, ChangeKind};
pub use placement::{KeyHash, Md5Hash, chunk_of, partition_of};
pub use store::{LoadProgress, ReadOnlyStore};
pub use version::{Layout, Lookup, Metadata, RingFile, StoreDef, Version, VersionError, ring_checksum};

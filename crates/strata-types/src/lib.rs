//! Identifiers, keys and the injectable clock shared by every Strata layer.
//!
//! This is the bottom of the dependency graph: it must not depend on any other
//! Strata crate, nor on I/O, async runtimes or storage.
//!
//! Layer rule (checked by the test command): may use no Strata crate;
//! never an async runtime or an HTTP crate.

pub mod clock;
pub mod id;
pub mod policy;

pub use clock::{Clock, ManualClock, SystemClock};
pub use id::{BlobId, BlobKind, ContainerRef, IdBytes, IdError, Key, KeyKind, MAX_KEY_LEN, PartitionId};
pub use policy::{Policies, Policy};

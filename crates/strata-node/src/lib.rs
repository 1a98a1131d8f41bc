//! A storage node's own work, below its HTTP port: its disks (one engine
//! store each), the cluster node that follows the map (the map feed, the
//! reconciler that opens and creates the replicas the map places here),
//! pull replication between replicas (Ambry §4.3), the scrubber, the orphan
//! sweep, compaction, the space monitor, fetching read-only store
//! versions from their sources (Spock §4.3.1), serving read-write
//! stores (Spock §3.1: the replica RPCs, server-side routing to a key's
//! pseudo-master, the hint pusher) and tracts of striped blobs (FDS §2.1:
//! the tractserver's row checks over `strata-tract`), and change capture's
//! senders of the names' outbox (`strata-events`).
//!
//! Every background loop is a worker of [`Workers`]: one way to start,
//! stop and observe them.
//!
//! Layer rule (checked by the test command): may use strata-types,
//! strata-format, strata-fs, strata-engine, strata-net, strata-rpc,
//! strata-cluster, strata-router, strata-names, strata-kv, strata-rwstore,
//! strata-tract, strata-txn, strata-client, strata-events;
//! never the server, the S3 crate, or axum.

mod background;
pub mod capture;
mod disks;
pub mod kv_fetch;
mod liveness;
mod moves;
mod node;
mod replication;
pub mod rw;
mod scrub;
mod sweep;
pub mod tracts;
pub mod txn;
pub mod worker;

pub use background::{start_compactor, start_space_monitor};
pub use capture::{Capture, CaptureStatus};
pub use disks::Disks;
pub use moves::{MoveCopies, MoveCopy};
pub use node::{ClusterConfig, ClusterError, ClusterNode};
pub use replication::{PairLag, Replication};
pub use scrub::{ScrubConfig, ScrubStatus, Scrubber};
pub use sweep::{SweepConfig, SweepStatus, Sweeper};
pub use worker::{Next, PassFailed, WorkerInfo, Workers};

//! The metadata service: the cluster map kept by a Raft group (openraft) of
//! 1, 3 or 5 nodes. The Raft log and vote live in files with checksummed
//! frames; the state machine is the map, snapshotted to a file. Raft
//! messages travel over HTTP as frames (docs/formats.md, "Frame").

mod feed;
mod log_store;
mod names;
mod network;
mod service;
mod state_machine;

pub use feed::{MapFeed, fetch_map};
pub use log_store::LogStore;
pub use names::RaftNames;
pub use network::{KIND_ADD_LEARNER, KIND_APPEND, KIND_PROPOSE, KIND_PROPOSE_INDEXED, KIND_READ_INDEX, KIND_SNAPSHOT, KIND_VOTE};
pub use service::{MetaConfig, MetaError, MetaService, MetaStatus};
pub use state_machine::StateMachine;

use crate::map::{Command, Outcome};

openraft::declare_raft_types!(
    /// Openraft's types for the metadata group.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = std::io::Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

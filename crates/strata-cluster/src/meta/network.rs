//! Raft over `strata-net`: each RPC is a POST of a frame holding the postcard
//! request; the answer is a frame holding `Result<response, RaftError>`.

use super::TypeConfig;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest, VoteResponse};
use openraft::{AnyError, BasicNode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;
use strata_net::NetError;

/// Frame kind of an AppendEntries request and its answer.
pub const KIND_APPEND: u16 = 0x10;
/// Frame kind of a Vote request and its answer.
pub const KIND_VOTE: u16 = 0x11;
/// Frame kind of an InstallSnapshot request and its answer.
pub const KIND_SNAPSHOT: u16 = 0x12;
/// Frame kind of a forwarded proposal and its answer.
pub const KIND_PROPOSE: u16 = 0x13;
/// A follower asking the leader for a read index (empty payload; the
/// answer is postcard `Result<u64, String>`).
pub const KIND_READ_INDEX: u16 = 0x14;
/// A forwarded proposal whose answer also carries the log index it was
/// committed at (`Result<(Outcome, u64), String>`); 0x13 keeps its answer.
pub const KIND_PROPOSE_INDEXED: u16 = 0x15;
/// A node outside the group asking to follow it as a learner (payload
/// postcard `(node id, "host:port")`; the answer is `Result<(), String>`,
/// an error from a member that is not the leader).
pub const KIND_ADD_LEARNER: u16 = 0x16;

/// Creates a connection object per peer.
#[derive(Clone)]
pub struct Network {
    pub(crate) client: strata_net::Client,
}

/// The connection to one peer.
pub struct Conn {
    client: strata_net::Client,
    addr: String,
    target: u64,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Conn;
    async fn new_client(&mut self, target: u64, node: &BasicNode) -> Conn {
        Conn { client: self.client.clone(), addr: node.addr.clone(), target }
    }
}

impl Conn {
    async fn call<Req: Serialize, Resp: DeserializeOwned, E: std::error::Error + DeserializeOwned>(
        &self,
        kind: u16,
        path: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        let payload = postcard::to_stdvec(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let timeout = option.hard_ttl().max(Duration::from_millis(200));
        let answer = self.client.post_frame(&self.addr, path, kind, &payload, timeout).await.map_err(|e| match e {
            NetError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
            NetError::Garbage { .. } => RPCError::Network(NetworkError::new(&e)),
        })?;
        let r: Result<Resp, RaftError<u64, E>> = postcard::from_bytes(&answer).map_err(|e| RPCError::Network(NetworkError::new(&AnyError::new(&e))))?;
        r.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Conn {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(KIND_APPEND, "/raft/v1/append", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<u64>, RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>> {
        self.call(KIND_SNAPSHOT, "/raft/v1/snapshot", &rpc, &option).await
    }

    async fn vote(&mut self, rpc: VoteRequest<u64>, option: RPCOption) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.call(KIND_VOTE, "/raft/v1/vote", &rpc, &option).await
    }
}

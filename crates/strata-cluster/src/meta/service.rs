//! The metadata service of one node: its Raft member, proposals (forwarded
//! to the leader when this node is not it), the map, and the handler for
//! Raft messages that the HTTP server routes here.

use super::network::{KIND_ADD_LEARNER, KIND_APPEND, KIND_PROPOSE, KIND_PROPOSE_INDEXED, KIND_READ_INDEX, KIND_SNAPSHOT, KIND_VOTE, Network};
use super::{LogStore, StateMachine, TypeConfig};
use crate::map::{ClusterMap, Command, MapError, Outcome};
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::{BasicNode, Raft, SnapshotPolicy};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use strata_format::frame::{decode_frame, encode_frame};
use tokio::sync::watch;

/// Settings of a metadata member.
#[derive(Debug, Clone)]
pub struct MetaConfig {
    /// This node's id (also its Raft id).
    pub id: u64,
    /// Where the Raft log, vote and snapshot live.
    pub dir: PathBuf,
    /// Leader heartbeat period.
    pub heartbeat: Duration,
    /// Election timeout range start; a follower that hears no leader for a
    /// random time in [min, 2 min) calls an election.
    pub election_timeout_min: Duration,
}

impl MetaConfig {
    /// Defaults for a node: 150 ms heartbeats, elections after 0.6–1.2 s.
    pub fn new(id: u64, dir: PathBuf) -> Self {
        Self { id, dir, heartbeat: Duration::from_millis(150), election_timeout_min: Duration::from_millis(600) }
    }
}

/// Errors of the metadata service.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// Local files could not be read or written.
    #[error("metadata storage: {0}")]
    Io(#[from] std::io::Error),
    /// No leader could be reached in time; retry.
    #[error("no metadata leader is reachable: {0}")]
    NoLeader(String),
    /// The group was initialized already.
    #[error("the metadata group is already initialized")]
    AlreadyInitialized,
    /// The request is invalid.
    #[error("{0}")]
    Invalid(String),
    /// The map refused the command; nothing changed.
    #[error("{0}")]
    Refused(MapError),
    /// Raft failed.
    #[error("raft: {0}")]
    Raft(String),
}

/// What `cluster status` shows of the metadata group.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MetaStatus {
    /// This node.
    pub id: u64,
    /// The leader this node knows of.
    pub leader: Option<u64>,
    /// Current term.
    pub term: u64,
    /// Index of the last applied log entry.
    pub last_applied: Option<u64>,
    /// Voting members and their addresses.
    pub members: BTreeMap<u64, String>,
    /// Learners (nodes outside the group that follow its log to serve S3)
    /// and their addresses.
    #[serde(default)]
    pub learners: BTreeMap<u64, String>,
    /// Epoch of the map this node has applied.
    pub epoch: u64,
}

/// One node's metadata service.
pub struct MetaService {
    id: u64,
    raft: Raft<TypeConfig>,
    map_rx: watch::Receiver<Arc<ClusterMap>>,
    client: strata_net::Client,
    sm: StateMachine,
}

impl MetaService {
    /// Opens the log and state machine in `config.dir` and starts the Raft member.
    pub async fn start(config: MetaConfig) -> Result<Arc<Self>, MetaError> {
        let log = LogStore::open(&config.dir)?;
        let sm = StateMachine::open(&config.dir)?;
        let map_rx = sm.subscribe();
        let client = strata_net::Client::new();
        let min = config.election_timeout_min.as_millis() as u64;
        let raft_config = openraft::Config {
            cluster_name: "strata-meta".into(),
            heartbeat_interval: config.heartbeat.as_millis() as u64,
            election_timeout_min: min,
            election_timeout_max: min * 2,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(1000),
            max_in_snapshot_log_to_keep: 100,
            ..Default::default()
        };
        let raft_config = Arc::new(raft_config.validate().map_err(|e| MetaError::Invalid(e.to_string()))?);
        let raft = Raft::new(config.id, raft_config, Network { client: client.clone() }, log, sm.clone()).await.map_err(|e| MetaError::Raft(e.to_string()))?;
        Ok(Arc::new(Self { id: config.id, raft, map_rx, client, sm }))
    }

    /// Makes `members` (id → `host:port`) the first voting configuration.
    /// Run once, on one member, when the cluster is created.
    pub async fn initialize(&self, members: BTreeMap<u64, String>) -> Result<(), MetaError> {
        if !members.contains_key(&self.id) {
            return Err(MetaError::Invalid(format!("node {} must be one of the initial members", self.id)));
        }
        let nodes: BTreeMap<u64, BasicNode> = members.into_iter().map(|(id, addr)| (id, BasicNode { addr })).collect();
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Err(MetaError::AlreadyInitialized),
            Err(e) => Err(MetaError::Raft(e.to_string())),
        }
    }

    /// The map as this node last applied it.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map_rx.borrow().clone()
    }

    /// A receiver that wakes on every applied change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterMap>> {
        self.map_rx.clone()
    }

    /// The group as this node sees it.
    pub fn status(&self) -> MetaStatus {
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let addrs = |ids: Vec<u64>| ids.into_iter().map(|id| (id, membership.get_node(&id).map(|n| n.addr.clone()).unwrap_or_default())).collect();
        MetaStatus {
            id: self.id,
            leader: m.current_leader,
            term: m.current_term,
            last_applied: m.last_applied.map(|l| l.index),
            members: addrs(membership.voter_ids().collect()),
            learners: addrs(membership.learner_ids().collect()),
            epoch: self.map().epoch,
        }
    }

    /// Commits a command through the leader and returns its outcome,
    /// forwarding to the leader when this node is not it. Retries for a
    /// few seconds while no leader is known (an election).
    pub async fn propose(&self, cmd: Command) -> Result<Outcome, MetaError> {
        self.propose_indexed(cmd).await.map(|(o, _)| o)
    }

    /// [`MetaService::propose`], also returning the log index the command
    /// was committed at (to wait for it locally with
    /// [`MetaService::wait_applied`]).
    pub async fn propose_indexed(&self, cmd: Command) -> Result<(Outcome, u64), MetaError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
        let mut last = String::from("no leader elected yet");
        while tokio::time::Instant::now() < deadline {
            match self.raft.client_write(cmd.clone()).await {
                Ok(r) => return Ok((r.data, r.log_id.index)),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                    if let Some(node) = f.leader_node {
                        match self.forward(&node.addr, &cmd).await {
                            Ok(o) => return Ok(o),
                            Err(e) => last = e,
                        }
                    }
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        Err(MetaError::NoLeader(last))
    }

    async fn forward(&self, addr: &str, cmd: &Command) -> Result<(Outcome, u64), String> {
        let payload = postcard::to_stdvec(cmd).map_err(|e| e.to_string())?;
        let answer =
            self.client.post_frame(addr, "/meta/v1/propose", KIND_PROPOSE_INDEXED, &payload, Duration::from_secs(5)).await.map_err(|e| e.to_string())?;
        let r: Result<(Outcome, u64), String> = postcard::from_bytes(&answer).map_err(|e| e.to_string())?;
        r
    }

    /// A linearizable read point (Raft's read index): the leader confirms
    /// it still leads and answers its commit index; a follower asks the
    /// leader. Once this node has applied that index, its state holds every
    /// write that was acknowledged before the call.
    pub async fn read_index(&self) -> Result<u64, MetaError> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(8);
        let mut last = String::from("no leader elected yet");
        while tokio::time::Instant::now() < deadline {
            match self.raft.ensure_linearizable().await {
                Ok(log_id) => return Ok(log_id.map_or(0, |l| l.index)),
                Err(RaftError::APIError(openraft::error::CheckIsLeaderError::ForwardToLeader(f))) => {
                    if let Some(node) = f.leader_node {
                        let asked = self.client.post_frame(&node.addr, "/meta/v1/read-index", KIND_READ_INDEX, &[], Duration::from_secs(5)).await;
                        match asked.map_err(|e| e.to_string()).and_then(|a| postcard::from_bytes::<Result<u64, String>>(&a).map_err(|e| e.to_string())) {
                            Ok(Ok(i)) => return Ok(i),
                            Ok(Err(e)) | Err(e) => last = e,
                        }
                    }
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(MetaError::NoLeader(last))
    }

    /// Whether this node is in the group's membership (as a voter or a
    /// learner) as far as it knows.
    pub fn in_membership(&self) -> bool {
        self.raft.metrics().borrow().membership_config.membership().get_node(&self.id).is_some()
    }

    /// On the leader: makes node `id` at `addr` a learner, which receives
    /// every entry (the map and the names) without voting. A learner must
    /// not be a voter already; a node that is a learner already is left as
    /// it is.
    pub async fn add_learner(&self, id: u64, addr: String) -> Result<(), MetaError> {
        let m = self.raft.metrics().borrow().clone();
        if m.membership_config.membership().voter_ids().any(|v| v == id) {
            return Err(MetaError::Invalid(format!("node {id} is a voting member, not a learner")));
        }
        if m.membership_config.membership().get_node(&id).is_some() {
            return Ok(());
        }
        self.raft.add_learner(id, BasicNode { addr }, false).await.map(|_| ()).map_err(|e| MetaError::Raft(e.to_string()))
    }

    /// On a node outside the group: asks each of `members` in turn to make
    /// this node (reachable at `addr`) a learner, until the leader agrees.
    pub async fn ask_to_learn(&self, members: &[String], addr: &str) -> Result<(), MetaError> {
        let payload = postcard::to_stdvec(&(self.id, addr)).map_err(|e| MetaError::Invalid(e.to_string()))?;
        let mut last = String::from("no metadata members configured");
        for m in members {
            match self.client.post_frame(m, "/meta/v1/add-learner", KIND_ADD_LEARNER, &payload, Duration::from_secs(5)).await {
                Ok(a) => match postcard::from_bytes::<Result<(), String>>(&a) {
                    Ok(Ok(())) => return Ok(()),
                    Ok(Err(e)) => last = format!("{m}: {e}"),
                    Err(e) => last = format!("{m}: {e}"),
                },
                Err(e) => last = e.to_string(),
            }
        }
        Err(MetaError::NoLeader(last))
    }

    /// Waits until this node has applied the entry at `index`.
    pub async fn wait_applied(&self, index: u64) {
        self.sm.wait_applied(index).await;
    }

    /// The S3 API's name state as this node has applied it.
    pub fn names(&self) -> &std::sync::RwLock<strata_names::NameState> {
        self.sm.names()
    }

    /// Handles a frame POSTed to `/raft/v1/*` or `/meta/v1/propose` and
    /// returns the answer frame, or a message for a 400.
    pub async fn handle(&self, body: &[u8]) -> Result<Vec<u8>, String> {
        let (kind, payload) = decode_frame(body).map_err(|e| e.to_string())?;
        let bad = |e: postcard::Error| format!("undecodable message of kind {kind}: {e}");
        let answer = match kind {
            KIND_APPEND => postcard::to_stdvec(&self.raft.append_entries(postcard::from_bytes(payload).map_err(bad)?).await),
            KIND_VOTE => postcard::to_stdvec(&self.raft.vote(postcard::from_bytes(payload).map_err(bad)?).await),
            KIND_SNAPSHOT => postcard::to_stdvec(&self.raft.install_snapshot(postcard::from_bytes(payload).map_err(bad)?).await),
            KIND_PROPOSE => {
                // Only the leader answers a forwarded proposal; no second hop.
                let cmd: Command = postcard::from_bytes(payload).map_err(bad)?;
                let r: Result<Outcome, String> = self.raft.client_write(cmd).await.map(|r| r.data).map_err(|e| e.to_string());
                postcard::to_stdvec(&r)
            }
            KIND_PROPOSE_INDEXED => {
                let cmd: Command = postcard::from_bytes(payload).map_err(bad)?;
                let r: Result<(Outcome, u64), String> = self.raft.client_write(cmd).await.map(|r| (r.data, r.log_id.index)).map_err(|e| e.to_string());
                postcard::to_stdvec(&r)
            }
            KIND_READ_INDEX => {
                let r: Result<u64, String> = self.raft.ensure_linearizable().await.map(|l| l.map_or(0, |l| l.index)).map_err(|e| e.to_string());
                postcard::to_stdvec(&r)
            }
            KIND_ADD_LEARNER => {
                let (id, addr): (u64, String) = postcard::from_bytes(payload).map_err(bad)?;
                let r: Result<(), String> = self.add_learner(id, addr).await.map_err(|e| e.to_string());
                postcard::to_stdvec(&r)
            }
            k => return Err(format!("unknown message kind {k}")),
        };
        Ok(encode_frame(kind, &answer.map_err(|e| e.to_string())?))
    }

    /// Stops the Raft member.
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }
}

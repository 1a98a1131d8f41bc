//! Raft over HTTP: each RPC is a POST of a frame holding the postcard
//! request; the answer is a frame holding `Result<response, RaftError>`.

use super::TypeConfig;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest, VoteResponse};
use openraft::{AnyError, BasicNode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;
use strata_format::frame::{decode_frame, encode_frame};

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

/// The HTTP client nodes use to talk to each other: TLS with the cluster's
/// certificates once [`set_cluster_tls`] was called, plain HTTP before.
pub type HttpClient = hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, Full<Bytes>>;

static OUTBOUND_IP: std::sync::OnceLock<std::net::IpAddr> = std::sync::OnceLock::new();
static CLUSTER_TLS: std::sync::OnceLock<std::sync::Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();

/// Makes every node-to-node connection of this process mutual TLS with
/// `config` (the cluster's CA as the only root, this node's certificate as
/// its identity), asking for [`strata_auth::CLUSTER_SERVER_NAME`]. Call once,
/// before the first client is made; later calls are ignored.
pub fn set_cluster_tls(config: std::sync::Arc<rustls::ClientConfig>) {
    let _ = CLUSTER_TLS.set(config);
}

/// `https` once the cluster's TLS is set, else `http`: the scheme of every
/// node-to-node URL.
pub fn scheme() -> &'static str {
    if CLUSTER_TLS.get().is_some() { "https" } else { "http" }
}

/// Makes every node-to-node connection of this process leave from `ip`
/// (a multi-homed host, or nodes sharing one host on 127.0.0.x). Call once,
/// before the first client is made; later calls are ignored.
pub fn set_outbound_ip(ip: std::net::IpAddr) {
    let _ = OUTBOUND_IP.set(ip);
}

/// A client with short connect timeouts, keeping connections alive.
pub fn http_client() -> HttpClient {
    let mut c = hyper_util::client::legacy::connect::HttpConnector::new();
    c.set_local_address(OUTBOUND_IP.get().copied());
    c.set_connect_timeout(Some(Duration::from_secs(1)));
    c.set_nodelay(true);
    c.enforce_http(false);
    let tls = match CLUSTER_TLS.get() {
        Some(t) => (**t).clone(),
        // No cluster TLS: plain HTTP only (no root is trusted).
        None => rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
    };
    let name = rustls::pki_types::ServerName::try_from(strata_auth::CLUSTER_SERVER_NAME).expect("a valid DNS name");
    let conn = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        .enable_http1()
        .wrap_connector(c);
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(conn)
}

/// Why a frame exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    /// No connection, or it broke, or the deadline passed.
    #[error("{addr} unreachable: {detail}")]
    Unreachable {
        /// Peer.
        addr: String,
        /// What happened.
        detail: String,
    },
    /// The peer answered something that is not a valid frame of the kind.
    #[error("{addr} answered garbage: {detail}")]
    Garbage {
        /// Peer.
        addr: String,
        /// What was wrong.
        detail: String,
    },
}

/// POSTs `payload` as a frame of `kind` to `https://addr{path}` and returns
/// the answer's payload, which must be a frame of the same kind.
pub async fn post_frame(client: &HttpClient, addr: &str, path: &str, kind: u16, payload: &[u8], timeout: Duration) -> Result<Vec<u8>, PostError> {
    let body = post_raw(client, addr, path, encode_frame(kind, payload), timeout).await?;
    let garbage = |d: String| PostError::Garbage { addr: addr.to_string(), detail: d };
    let (k, p) = decode_frame(&body).map_err(|e| garbage(e.to_string()))?;
    if k != kind {
        return Err(garbage(format!("frame kind {k}, expected {kind}")));
    }
    Ok(p.to_vec())
}

/// POSTs `body` (a frame) to `https://addr{path}` and returns the answer's
/// bytes; a non-2xx status is garbage, no answer in `timeout` unreachable.
pub async fn post_raw(client: &HttpClient, addr: &str, path: &str, body: Vec<u8>, timeout: Duration) -> Result<Bytes, PostError> {
    let unreachable = |d: String| PostError::Unreachable { addr: addr.to_string(), detail: d };
    let garbage = |d: String| PostError::Garbage { addr: addr.to_string(), detail: d };
    let req = http::Request::post(format!("{}://{addr}{path}", scheme()))
        .header(http::header::CONTENT_TYPE, "application/x-strata-frame")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| garbage(e.to_string()))?;
    let fut = async {
        let resp = client.request(req).await.map_err(|e| unreachable(e.to_string()))?;
        let status = resp.status();
        let body = resp.into_body().collect().await.map_err(|e| unreachable(e.to_string()))?.to_bytes();
        if !status.is_success() {
            return Err(garbage(format!("HTTP {status}: {}", String::from_utf8_lossy(&body[..body.len().min(200)]))));
        }
        Ok(body)
    };
    tokio::time::timeout(timeout, fut).await.map_err(|_| unreachable(format!("no answer within {timeout:?}")))?
}

/// Creates a connection object per peer.
#[derive(Clone)]
pub struct Network {
    pub(crate) client: HttpClient,
}

/// The connection to one peer.
pub struct Conn {
    client: HttpClient,
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
        let answer = post_frame(&self.client, &self.addr, path, kind, &payload, timeout).await.map_err(|e| match e {
            PostError::Unreachable { .. } => RPCError::Unreachable(Unreachable::new(&e)),
            PostError::Garbage { .. } => RPCError::Network(NetworkError::new(&e)),
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

//! The node-to-node transport: the one HTTP client every node uses to talk
//! to the others (Raft messages, replica RPCs, map pulls, forwarded
//! commands), with mutual TLS over the cluster's certificates once
//! [`set_cluster_tls`] was called, and a fixed outbound address when nodes
//! share a host.
//!
//! Owns: connection set-up (timeouts, keep-alive, TLS, source address),
//! replica RPC sessions (connections upgraded to `strata-rpc/1`, pooled),
//! the exchange of one frame (`docs/formats.md`, "Frame") or one body for
//! an answer, and what a failed exchange means ([`NetError`]).
//! Callers see bytes and [`NetError`]s, never hyper's types, so the layers
//! above (the metadata service, RPC) hold no HTTP client of their own.
//!
//! Layer rule (checked by the test command): may use strata-format,
//! strata-auth; never axum or the storage engine.

use bytes::Bytes;
use http_body_util::BodyExt;
use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use strata_format::frame::{decode_frame, encode_frame};

type Inner = hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, Chunks>;

/// A body sent as the chunks it was given, in order, none copied into
/// another buffer (a replica write's blob data goes out as the router got
/// it), with its exact length so the peer reads a Content-Length.
#[derive(Debug, Default)]
pub struct Chunks {
    chunks: VecDeque<Bytes>,
    remaining: u64,
}

impl Chunks {
    /// A body of `chunks`, in order.
    pub fn new(chunks: Vec<Bytes>) -> Self {
        let remaining = chunks.iter().map(|c| c.len() as u64).sum();
        Self { chunks: chunks.into_iter().filter(|c| !c.is_empty()).collect(), remaining }
    }
}

impl From<Vec<u8>> for Chunks {
    fn from(body: Vec<u8>) -> Self {
        Self::new(vec![Bytes::from(body)])
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: std::pin::Pin<&mut Self>, _: &mut std::task::Context<'_>) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.chunks.pop_front();
        if let Some(c) = &next {
            self.remaining -= c.len() as u64;
        }
        std::task::Poll::Ready(next.map(|c| Ok(http_body::Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.remaining)
    }
}

/// A pooled client for node-to-node requests. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    http: Inner,
    /// For session upgrades only: keeps no idle connection, so each
    /// upgrade is the first request of a new connection, where a node
    /// looks for one.
    upgrades: Inner,
    /// Idle replica RPC sessions, by peer address.
    idle: Arc<std::sync::Mutex<std::collections::HashMap<String, Vec<Session>>>>,
}

/// The `Upgrade` token of a replica RPC session: a node's connection to
/// another, upgraded by `POST /rpc/v1/session`, on which each request is a
/// frame and each answer the frame `/rpc/v1/...` would answer, in order.
pub const RPC_SESSION_PROTOCOL: &str = "strata-rpc/1";
/// Largest request frame a replica RPC session carries.
pub const RPC_SESSION_FRAME_MAX: usize = 64 << 20;
/// Largest answer frame a session takes: any frame, as over HTTP (a
/// fetch's answer holds whole records, and a batch of them may pass
/// [`RPC_SESSION_FRAME_MAX`]).
pub const RPC_SESSION_ANSWER_MAX: usize = strata_format::frame::FRAME_HEADER_BYTES + strata_format::frame::FRAME_PAYLOAD_MAX + 4;
/// Sessions idle longer than this are closed rather than reused, well
/// before the peer's head timeout (30 s) ends them.
const SESSION_REUSE: Duration = Duration::from_secs(10);
/// Idle sessions kept per peer.
const SESSIONS_IDLE_MAX: usize = 64;

/// One replica RPC session.
struct Session {
    io: hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>,
    buf: bytes::BytesMut,
    last_used: std::time::Instant,
}

static OUTBOUND_IP: OnceLock<std::net::IpAddr> = OnceLock::new();
static CLUSTER_TLS: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();

/// Makes every node-to-node connection of this process mutual TLS with
/// `config` (the cluster's CA as the only root, this node's certificate as
/// its identity), asking for [`strata_auth::CLUSTER_SERVER_NAME`]. Call once,
/// before the first client is made; later calls are ignored.
pub fn set_cluster_tls(config: Arc<rustls::ClientConfig>) {
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

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// No connection, or it broke, or the deadline passed.
    #[error("{addr} unreachable: {detail}")]
    Unreachable {
        /// Peer.
        addr: String,
        /// What happened.
        detail: String,
    },
    /// The peer answered something that is not a valid answer (a non-2xx
    /// status, or a frame of the wrong kind or with a bad checksum).
    #[error("{addr} answered garbage: {detail}")]
    Garbage {
        /// Peer.
        addr: String,
        /// What was wrong.
        detail: String,
    },
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    /// A client with short connect timeouts, keeping connections alive.
    pub fn new() -> Self {
        let mut c = hyper_util::client::legacy::connect::HttpConnector::new();
        c.set_local_address(OUTBOUND_IP.get().copied());
        c.set_connect_timeout(Some(Duration::from_secs(1)));
        c.set_nodelay(true);
        c.enforce_http(false);
        let tls = match CLUSTER_TLS.get() {
            Some(t) => (**t).clone(),
            // No cluster TLS: plain HTTP only (no root is trusted).
            None => rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
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
        Self {
            http: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(conn.clone()),
            upgrades: hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).pool_max_idle_per_host(0).build(conn),
            idle: Default::default(),
        }
    }

    /// POSTs `payload` as a frame of `kind` to `addr`'s `path` and returns
    /// the answer's payload, which must be a frame of the same kind.
    pub async fn post_frame(&self, addr: &str, path: &str, kind: u16, payload: &[u8], timeout: Duration) -> Result<Vec<u8>, NetError> {
        let body = self.post_raw(addr, path, encode_frame(kind, payload), timeout).await?;
        let garbage = |d: String| NetError::Garbage { addr: addr.to_string(), detail: d };
        let (k, p) = decode_frame(&body).map_err(|e| garbage(e.to_string()))?;
        if k != kind {
            return Err(garbage(format!("frame kind {k}, expected {kind}")));
        }
        Ok(p.to_vec())
    }

    /// POSTs `body` (a frame) to `addr`'s `path` and returns the answer's
    /// bytes; a non-2xx status is garbage, no answer in `timeout` unreachable.
    pub async fn post_raw(&self, addr: &str, path: &str, body: Vec<u8>, timeout: Duration) -> Result<Bytes, NetError> {
        self.exchange(http::Method::POST, addr, path, "application/x-strata-frame", body.into(), timeout).await
    }

    /// [`Client::post_raw`] with a frame given as chunks, sent without
    /// joining them.
    pub async fn post_chunks(&self, addr: &str, path: &str, chunks: Vec<Bytes>, timeout: Duration) -> Result<Bytes, NetError> {
        self.exchange(http::Method::POST, addr, path, "application/x-strata-frame", Chunks::new(chunks), timeout).await
    }

    /// POSTs a JSON body to `addr`'s `path` and returns the answer's bytes.
    pub async fn post_json(&self, addr: &str, path: &str, body: Vec<u8>, timeout: Duration) -> Result<Bytes, NetError> {
        self.exchange(http::Method::POST, addr, path, "application/json", body.into(), timeout).await
    }

    /// GETs `addr`'s `path` and returns the answer's bytes.
    pub async fn get(&self, addr: &str, path: &str, timeout: Duration) -> Result<Bytes, NetError> {
        self.exchange(http::Method::GET, addr, path, "application/octet-stream", Chunks::default(), timeout).await
    }

    /// Sends a frame (given as chunks) through a replica RPC session to
    /// `addr` and returns the answer frame: an idle session's, or a new
    /// one's. With `retry` (a request whose repetition is harmless), a
    /// reused session that fails is replaced by a new one once, as an
    /// HTTP client retries on a kept-alive connection the peer closed.
    pub async fn session_exchange(&self, addr: &str, chunks: &[Bytes], retry: bool, timeout: Duration) -> Result<Bytes, NetError> {
        let unreachable = |d: String| NetError::Unreachable { addr: addr.to_string(), detail: d };
        let fut = async {
            let pooled = {
                let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                let list = idle.entry(addr.to_string()).or_default();
                list.retain(|s| s.last_used.elapsed() < SESSION_REUSE);
                list.pop()
            };
            let reused = pooled.is_some();
            let mut s = match pooled {
                Some(s) => s,
                None => self.open_session(addr).await?,
            };
            let answer = match exchange_on(&mut s, chunks).await {
                Ok(a) => a,
                Err(e) if reused && retry => {
                    drop(s);
                    s = self.open_session(addr).await?;
                    exchange_on(&mut s, chunks).await.map_err(|e2| unreachable(format!("{e}; then, on a new session: {e2}")))?
                }
                Err(e) => return Err(unreachable(e)),
            };
            s.last_used = std::time::Instant::now();
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            let list = idle.entry(addr.to_string()).or_default();
            if list.len() < SESSIONS_IDLE_MAX {
                list.push(s);
            }
            Ok(answer)
        };
        tokio::time::timeout(timeout, fut).await.map_err(|_| unreachable(format!("no answer within {timeout:?}")))?
    }

    async fn open_session(&self, addr: &str) -> Result<Session, NetError> {
        let unreachable = |d: String| NetError::Unreachable { addr: addr.to_string(), detail: d };
        let req = http::Request::builder()
            .method(http::Method::POST)
            .uri(format!("{}://{addr}/rpc/v1/session", scheme()))
            .header(http::header::CONNECTION, "upgrade")
            .header(http::header::UPGRADE, RPC_SESSION_PROTOCOL)
            .body(Chunks::default())
            .map_err(|e| NetError::Garbage { addr: addr.to_string(), detail: e.to_string() })?;
        let resp = self.upgrades.request(req).await.map_err(|e| unreachable(e.to_string()))?;
        if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            let status = resp.status();
            let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            return Err(NetError::Garbage {
                addr: addr.to_string(),
                detail: format!("HTTP {status} to a session upgrade: {}", String::from_utf8_lossy(&body[..body.len().min(200)])),
            });
        }
        let io = hyper::upgrade::on(resp).await.map_err(|e| unreachable(e.to_string()))?;
        Ok(Session { io: hyper_util::rt::TokioIo::new(io), buf: bytes::BytesMut::with_capacity(4096), last_used: std::time::Instant::now() })
    }

    async fn exchange(&self, method: http::Method, addr: &str, path: &str, content_type: &str, body: Chunks, timeout: Duration) -> Result<Bytes, NetError> {
        let unreachable = |d: String| NetError::Unreachable { addr: addr.to_string(), detail: d };
        let garbage = |d: String| NetError::Garbage { addr: addr.to_string(), detail: d };
        let mut req = http::Request::builder().method(method.clone()).uri(format!("{}://{addr}{path}", scheme()));
        if method != http::Method::GET {
            req = req.header(http::header::CONTENT_TYPE, content_type);
        }
        let req = req.body(body).map_err(|e| garbage(e.to_string()))?;
        let fut = async {
            let resp = self.http.request(req).await.map_err(|e| unreachable(e.to_string()))?;
            let status = resp.status();
            let body = resp.into_body().collect().await.map_err(|e| unreachable(e.to_string()))?.to_bytes();
            if !status.is_success() {
                return Err(garbage(format!("HTTP {status}: {}", String::from_utf8_lossy(&body[..body.len().min(200)]))));
            }
            Ok(body)
        };
        tokio::time::timeout(timeout, fut).await.map_err(|_| unreachable(format!("no answer within {timeout:?}")))?
    }
}

/// Writes a request's chunks on a session and reads one answer frame.
async fn exchange_on(s: &mut Session, chunks: &[Bytes]) -> Result<Bytes, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let total: usize = chunks.iter().map(Bytes::len).sum();
    if chunks.len() > 1 && total <= 64 << 10 {
        // One write (one TLS record) for a small request.
        s.io.write_all(&chunks.concat()).await.map_err(|e| format!("session write: {e}"))?;
    } else {
        for c in chunks {
            s.io.write_all(c).await.map_err(|e| format!("session write: {e}"))?;
        }
    }
    // TLS may hold the request's last records after `write_all` (what a
    // full socket did not take): they go out before the answer is awaited.
    s.io.flush().await.map_err(|e| format!("session write: {e}"))?;
    loop {
        match strata_format::frame::next_frame_len(&s.buf, RPC_SESSION_ANSWER_MAX) {
            Ok(Some(n)) if s.buf.len() >= n => return Ok(s.buf.split_to(n).freeze()),
            // The rest of a long answer is read straight into one buffer
            // of its length (up to a bound, past which it grows as it comes).
            Ok(Some(n)) => s.buf.reserve((n - s.buf.len()).min(RPC_SESSION_FRAME_MAX)),
            Ok(None) => {}
            Err(e) => return Err(format!("session answer: {e}")),
        }
        if s.io.read_buf(&mut s.buf).await.map_err(|e| format!("session read: {e}"))? == 0 {
            return Err("the peer closed the session".into());
        }
    }
}

//! A client of read-write stores (Spock §3.1) over the nodes' HTTP API.
//!
//! Two ways to route (Spock §3.1.2, Fig. 3): server-side ([`RwClient::new`]),
//! where any node coordinates any key and a node that cannot be reached is
//! skipped for the next; or client-side ([`RwClient::connect`]), where the
//! client bootstraps the cluster map (topology and store definitions) from
//! any node and sends each put straight to the key's pseudo-master (the
//! first node of its preference list the map holds up) and each get to
//! the preference list's nearest node by the zone proximity list, failing
//! over along the list; a map that no longer places the store is read
//! again. [`RwClient::apply_update`] is Spock's applyUpdate: read, modify,
//! put if nothing changed since, and again when something did.
//!
//! Clocks travel in their text form and the client never needs to order
//! them: it sends back the clock that covers what it read.

use base64::Engine;
use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What a get returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RwVersions {
    /// Each concurrent version's clock (text form) and value; empty when
    /// the key has no live value.
    pub versions: Vec<(String, Bytes)>,
    /// The clock covering every version read: what a put that replaces
    /// them sends.
    pub clock: String,
}

/// Why a read-write store request failed.
#[derive(Debug, thiserror::Error)]
pub enum RwClientError {
    /// The put's clock does not follow what a replica holds: read again.
    #[error("obsolete version: {0}")]
    Obsolete(String),
    /// A node answered with another error.
    #[error(transparent)]
    Api(strata_client::ClientError),
    /// No node could be reached.
    #[error("no node answered: {0}")]
    Unreachable(String),
    /// An answer that is not what the API promises.
    #[error("unexpected answer: {0}")]
    Protocol(String),
}

/// A read-write store client over a set of nodes.
pub struct RwClient {
    nodes: Vec<Arc<Node>>,
    next: AtomicUsize,
    /// Client-side routing: the map, the zone proximity list, clients by node.
    routing: Option<Routing>,
    /// Whether requests go through sessions rather than HTTP requests.
    sessions: bool,
}

/// One node: its HTTP client and its idle sessions.
struct Node {
    client: strata_client::Client,
    idle: std::sync::Mutex<Vec<Session>>,
}

impl Node {
    fn new(url: &str, opts: &strata_client::ClientOptions) -> Arc<Self> {
        Arc::new(Self { client: strata_client::Client::with_options(url, opts), idle: Default::default() })
    }
}

/// A session (`strata_format::rw_session`): one connection upgraded from
/// HTTP, used by one request at a time.
struct Session {
    store: String,
    write: bool,
    io: strata_client::Upgraded,
    buf: bytes::BytesMut,
    last_used: std::time::Instant,
}

/// Sessions idle longer than this are closed rather than reused, well
/// before a node's head timeout (30 s by default) ends them.
const SESSION_REUSE: std::time::Duration = std::time::Duration::from_secs(10);
/// Idle sessions kept per node.
const SESSIONS_IDLE_MAX: usize = 64;
/// Largest answer a session reads.
const ANSWER_BYTES_MAX: usize = 1 << 30;

/// A request, as either transport carries it.
enum Op<'a> {
    Get,
    Put { value: Bytes, clock: &'a str },
    Delete { clock: &'a str },
}

/// An answer, as either transport carries it.
enum Reply {
    Versions(RwVersions),
    Written(String),
}

struct Routing {
    map: std::sync::RwLock<std::sync::Arc<strata_cluster::ClusterMap>>,
    proximity: Vec<String>,
    opts: strata_client::ClientOptions,
    scheme: &'static str,
    clients: std::sync::Mutex<std::collections::HashMap<strata_cluster::NodeId, Arc<Node>>>,
    /// Each store's replica table, with the epoch of the map it came from:
    /// working one out takes the whole ring, too much to do per request.
    tables: std::sync::Mutex<std::collections::HashMap<String, (u64, Arc<strata_placement::spock::ReplicaTable>)>>,
}

impl Routing {
    fn map(&self) -> std::sync::Arc<strata_cluster::ClusterMap> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `store`'s replica table in `map`, worked out once per map.
    fn table(&self, map: &strata_cluster::ClusterMap, store: &str) -> Option<Arc<strata_placement::spock::ReplicaTable>> {
        let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((epoch, t)) = tables.get(store)
            && *epoch == map.epoch
        {
            return Some(t.clone());
        }
        let t = Arc::new(map.rw_table(store).ok()?);
        tables.insert(store.to_string(), (map.epoch, t.clone()));
        Some(t)
    }

    /// The nodes to try for `key`: a put's pseudo-master first, a get's
    /// nearest replica first; then the rest of the preference list.
    fn order(&self, store: &str, key: &[u8], put: bool) -> Option<Vec<Arc<Node>>> {
        let map = self.map();
        let table = self.table(&map, store)?;
        let mut pref: Vec<strata_cluster::NodeId> = table.get(map.rw_partition_of(key) as usize)?.iter().map(|&n| u64::from(n)).collect();
        let up = |n: &strata_cluster::NodeId| map.nodes.get(n).is_some_and(|node| matches!(node.state, strata_cluster::NodeState::Up));
        if put {
            pref.sort_by_key(|n| !up(n));
        } else {
            let rank = |n: &strata_cluster::NodeId| map.nodes.get(n).and_then(|node| self.proximity.iter().position(|z| *z == node.zone)).unwrap_or(usize::MAX);
            pref.sort_by_key(|n| (!up(n), rank(n)));
        }
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        Some(
            pref.iter()
                .filter_map(|n| {
                    let addr = &map.nodes.get(n)?.addr;
                    Some(clients.entry(*n).or_insert_with(|| Node::new(&format!("{}://{addr}", self.scheme), &self.opts)).clone())
                })
                .collect(),
        )
    }
}

fn b64url(k: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k)
}

fn put_op(op: &Op<'_>) -> bool {
    !matches!(op, Op::Get)
}

fn written(r: Reply) -> Result<String, RwClientError> {
    match r {
        Reply::Written(c) => Ok(c),
        Reply::Versions(_) => Err(RwClientError::Protocol("a put answered with versions".into())),
    }
}

/// One request through an idle session to `c` (or a new one): a
/// session that breaks is dropped, and the error is a transport error,
/// as a broken HTTP connection's would be.
async fn call_session(node: &Node, store: &str, key: &[u8], op: &Op<'_>) -> Result<Reply, strata_client::ClientError> {
    use strata_format::rw_session::{self, Answer, Request};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let write = put_op(op);
    let pooled = {
        let mut idle = node.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|s| s.last_used.elapsed() < SESSION_REUSE);
        idle.iter().rposition(|s| s.write == write && s.store == store).map(|i| idle.swap_remove(i))
    };
    let mut s = match pooled {
        Some(s) => s,
        None => {
            let path = format!("/rw/{store}/{}", if write { "write-session" } else { "session" });
            let io = node.client.upgrade(&path, rw_session::PROTOCOL).await?;
            Session { store: store.to_string(), write, io, buf: bytes::BytesMut::with_capacity(4096), last_used: std::time::Instant::now() }
        }
    };
    let frame = match op {
        Op::Get => Request::Get { key }.encode(),
        Op::Put { value, clock } => Request::Put { key, clock, value }.encode(),
        Op::Delete { clock } => Request::Delete { key, clock }.encode(),
    };
    let broken = |e: std::io::Error| strata_client::ClientError::Transport(format!("session: {e}"));
    s.io.write_all(&frame).await.map_err(broken)?;
    // TLS may hold the frame's last records after `write_all`.
    s.io.flush().await.map_err(broken)?;
    let len = loop {
        match strata_format::frame::next_frame_len(&s.buf, ANSWER_BYTES_MAX) {
            Ok(Some(n)) if s.buf.len() >= n => break n,
            Ok(_) => {}
            Err(e) => return Err(strata_client::ClientError::Protocol(format!("session answer: {e}"))),
        }
        if s.io.read_buf(&mut s.buf).await.map_err(broken)? == 0 {
            return Err(strata_client::ClientError::Transport("session: the node closed it".into()));
        }
    };
    let frame = s.buf.split_to(len).freeze();
    let reply = match rw_session::decode_answer(&frame).map_err(|e| strata_client::ClientError::Protocol(format!("session answer: {e}")))? {
        Answer::Versions { clock, versions } => Ok(Reply::Versions(RwVersions {
            clock: clock.to_string(),
            versions: versions.into_iter().map(|(c, v)| (c.to_string(), frame.slice_ref(v))).collect(),
        })),
        Answer::Written { clock } => Ok(Reply::Written(clock.to_string())),
        Answer::Error { status, code, message } => Err(strata_client::ClientError::Api { status, code: code.to_string(), message: message.to_string() }),
    };
    // A refusal leaves the session usable; a bad frame ended it.
    if !matches!(&reply, Err(strata_client::ClientError::Api { status: 400, .. })) {
        s.last_used = std::time::Instant::now();
        let mut idle = node.idle.lock().unwrap_or_else(|p| p.into_inner());
        if idle.len() < SESSIONS_IDLE_MAX {
            idle.push(s);
        }
    }
    reply
}

/// One request as an HTTP request of the API.
async fn call_http(c: &strata_client::Client, store: &str, key: &[u8], op: &Op<'_>) -> Result<Reply, strata_client::ClientError> {
    let path = format!("/rw/{store}/{}", b64url(key));
    let (method, headers, body) = match op {
        Op::Get => (http::Method::GET, vec![], Bytes::new()),
        Op::Put { value, clock } => (http::Method::PUT, vec![("x-strata-clock", clock.to_string())], value.clone()),
        Op::Delete { clock } => (http::Method::DELETE, vec![("x-strata-clock", clock.to_string())], Bytes::new()),
    };
    let get = method == http::Method::GET;
    let b = c.send(method, &path, &headers, strata_client::full(body)).await?.bytes().await?;
    let v: serde_json::Value = serde_json::from_slice(&b).map_err(|e| strata_client::ClientError::Protocol(e.to_string()))?;
    if !get {
        let clock = v["clock"].as_str().ok_or_else(|| strata_client::ClientError::Protocol("answer without clock".into()))?;
        return Ok(Reply::Written(clock.to_string()));
    }
    Ok(Reply::Versions(versions_of(&v)?))
}

/// A get's answer as the HTTP API gives it: the covering clock and each
/// live version's clock and value (base64).
fn versions_of(v: &serde_json::Value) -> Result<RwVersions, strata_client::ClientError> {
    let bad = |what: &str| strata_client::ClientError::Protocol(format!("answer without {what}"));
    let clock = v["clock"].as_str().ok_or_else(|| bad("clock"))?.to_string();
    let mut out = RwVersions { clock, versions: Vec::new() };
    for e in v["versions"].as_array().ok_or_else(|| bad("versions"))? {
        let clock = e["clock"].as_str().ok_or_else(|| bad("a version's clock"))?.to_string();
        let value = base64::engine::general_purpose::STANDARD
            .decode(e["value"].as_str().ok_or_else(|| bad("a version's value"))?)
            .map_err(|e| strata_client::ClientError::Protocol(e.to_string()))?;
        out.versions.push((clock, Bytes::from(value)));
    }
    Ok(out)
}

impl RwClient {
    /// A client of the nodes at `urls`, signing and trusting as `opts` says.
    pub fn new(urls: &[String], opts: &strata_client::ClientOptions) -> Self {
        Self { nodes: urls.iter().map(|u| Node::new(u, opts)).collect(), next: AtomicUsize::new(0), routing: None, sessions: false }
    }

    /// Sends gets, puts and deletes through sessions (connections upgraded
    /// to `strata-rw/1`, binary messages, one request at a time each,
    /// kept for reuse) instead of one HTTP request each: the same answers
    /// and errors for less work on both sides.
    pub fn with_sessions(mut self, on: bool) -> Self {
        self.sessions = on;
        self
    }

    /// A client that routes itself (client-side routing): it reads the
    /// cluster map from the first of `seeds` that answers, and orders each
    /// key's preference list by the zone proximity list `proximity` (its
    /// own zone first) for gets and by the pseudo-master for puts. It
    /// uses sessions ([`RwClient::with_sessions`]).
    pub async fn connect(seeds: &[String], proximity: Vec<String>, opts: &strata_client::ClientOptions) -> Result<Self, RwClientError> {
        let mut c = Self::new(seeds, opts).with_sessions(true);
        let scheme = if seeds.first().is_some_and(|s| s.starts_with("https")) { "https" } else { "http" };
        c.routing = Some(Routing {
            map: std::sync::RwLock::new(std::sync::Arc::new(strata_cluster::ClusterMap::default())),
            proximity,
            opts: opts.clone(),
            scheme,
            clients: Default::default(),
            tables: Default::default(),
        });
        c.refresh().await?;
        Ok(c)
    }

    /// Reads the cluster map again (client-side routing).
    pub async fn refresh(&self) -> Result<(), RwClientError> {
        let Some(r) = &self.routing else { return Ok(()) };
        let mut errors = Vec::new();
        for c in self.nodes.iter().map(|n| &n.client) {
            match crate::routing::fetch_map(c).await {
                Ok(m) => {
                    crate::routing::keep_newer(&r.map, m);
                    return Ok(());
                }
                Err(e) => errors.push(format!("{}: {e}", c.base())),
            }
        }
        Err(RwClientError::Unreachable(format!("no node gave the cluster map: {}", errors.join("; "))))
    }

    /// The nodes to try, in order: from the map (client-side routing), or
    /// the next of the given nodes and the others after it.
    async fn targets(&self, store: &str, key: &[u8], put: bool) -> Vec<Arc<Node>> {
        if let Some(r) = &self.routing {
            if let Some(order) = r.order(store, key, put) {
                return order;
            }
            // A store this map does not know: perhaps a newer one does.
            if self.refresh().await.is_ok()
                && let Some(order) = r.order(store, key, put)
            {
                return order;
            }
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..self.nodes.len()).map(|i| self.nodes[(start + i) % self.nodes.len()].clone()).collect()
    }

    /// Sends to the first target that can be reached.
    async fn call(&self, store: &str, key: &[u8], op: Op<'_>) -> Result<Reply, RwClientError> {
        let put = !matches!(op, Op::Get);
        let mut errors = Vec::new();
        for node in &self.targets(store, key, put).await {
            let c = &node.client;
            let r = if self.sessions { call_session(node, store, key, &op).await } else { call_http(c, store, key, &op).await };
            match r {
                Ok(r) => return Ok(r),
                Err(strata_client::ClientError::Api { status: 409, message, .. }) => return Err(RwClientError::Obsolete(message)),
                Err(e @ strata_client::ClientError::Transport(_)) => errors.push(format!("{}: {e}", c.base())),
                Err(e) => return Err(RwClientError::Api(e)),
            }
        }
        Err(RwClientError::Unreachable(errors.join("; ")))
    }

    /// Every concurrent version of `key`.
    pub async fn get(&self, store: &str, key: &[u8]) -> Result<RwVersions, RwClientError> {
        match self.call(store, key, Op::Get).await? {
            Reply::Versions(v) => Ok(v),
            Reply::Written(_) => Err(RwClientError::Protocol("a get answered with a written clock".into())),
        }
    }

    /// Every concurrent version of each of `keys` (Spock's getAll), in
    /// order: one request to a node, which asks each replica once for all
    /// the keys it holds; failing over to the next node when one cannot be
    /// reached.
    pub async fn get_many(&self, store: &str, keys: &[&[u8]]) -> Result<Vec<RwVersions>, RwClientError> {
        let Some(first) = keys.first() else { return Ok(Vec::new()) };
        let body = serde_json::json!({ "keys": keys.iter().map(|k| b64url(k)).collect::<Vec<_>>() });
        let mut errors = Vec::new();
        for node in &self.targets(store, first, false).await {
            let c = &node.client;
            let v = match c.post_json(&format!("/rw/{store}/multi-get"), &body).await {
                Ok(v) => v,
                Err(e @ strata_client::ClientError::Transport(_)) => {
                    errors.push(format!("{}: {e}", c.base()));
                    continue;
                }
                Err(e) => return Err(RwClientError::Api(e)),
            };
            let results = v["results"].as_array().ok_or_else(|| RwClientError::Protocol("a multi-get answer without results".into()))?;
            if results.len() != keys.len() {
                return Err(RwClientError::Protocol(format!("{} results for {} keys", results.len(), keys.len())));
            }
            return results.iter().map(|r| versions_of(r).map_err(|e| RwClientError::Protocol(e.to_string()))).collect();
        }
        Err(RwClientError::Unreachable(errors.join("; ")))
    }

    /// Puts `value` over what was read with `clock`; the clock written.
    pub async fn put(&self, store: &str, key: &[u8], value: Bytes, clock: &str) -> Result<String, RwClientError> {
        written(self.call(store, key, Op::Put { value, clock }).await?)
    }

    /// Deletes what was read with `clock`.
    pub async fn delete(&self, store: &str, key: &[u8], clock: &str) -> Result<String, RwClientError> {
        written(self.call(store, key, Op::Delete { clock }).await?)
    }

    /// Spock's applyUpdate: reads `key`, computes the new value from the
    /// values read (several when there are siblings, none when absent) and
    /// puts it with the clock read; a put made obsolete by a concurrent one
    /// runs the whole step again, at most `tries` times. The clock written.
    pub async fn apply_update(&self, store: &str, key: &[u8], tries: u32, mut f: impl FnMut(&[Bytes]) -> Bytes) -> Result<String, RwClientError> {
        let mut last = None;
        for _ in 0..tries.max(1) {
            let read = self.get(store, key).await?;
            let values: Vec<Bytes> = read.versions.iter().map(|(_, v)| v.clone()).collect();
            match self.put(store, key, f(&values), &read.clock).await {
                Err(RwClientError::Obsolete(m)) => last = Some(RwClientError::Obsolete(m)),
                r => return r,
            }
        }
        Err(last.unwrap_or_else(|| RwClientError::Protocol("applyUpdate made no attempt".into())))
    }
}

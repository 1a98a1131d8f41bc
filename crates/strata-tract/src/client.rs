//! The client library (FDS §2.1, Fig. 1): the tract locator table cached
//! from the cluster map, writes to every disk of a tract's row, reads from
//! one at random, at most the cluster's simultaneous limit in flight.
//!
//! Every call is a future of its own: a caller starts as many as it likes
//! and they complete in any order; the client holds all but
//! [`TractClient::simultaneous_limit`] of them back. A node that answers
//! that the client's row version is stale (or that it holds no replica of
//! the row) makes the client read the map again and retry, and so does a
//! node that cannot be reached while the map still names it (the cluster
//! replaces it within its failure detection time), up to a deadline.

use crate::error::TractError;
use crate::guid::Guid;
use crate::meta::{BlobMeta, METADATA_TRACT, MetaOp};
use crate::{INCARNATION_HEADER, ROW_VERSION_HEADER, TRACT_VERSION_HEADER};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use strata_client::{Client, ClientError, ClientOptions};
use strata_cluster::{ClusterMap, NodeId, ReplicaLoc, TractRoute};

/// How long a tract request keeps retrying through map refreshes and
/// unreachable nodes before it gives up.
const RETRY_FOR: Duration = Duration::from_secs(30);

/// An open blob (FDS's `OpenBlob`): what its metadata said when it was
/// opened, created or extended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blob {
    /// Its GUID.
    pub guid: Guid,
    /// Which creation of the GUID this is.
    pub incarnation: u32,
    /// Replicas of each tract.
    pub replication: u8,
    /// Size in tracts when last asked.
    pub size_tracts: u64,
    /// When this incarnation was created, ms since the epoch.
    pub created_ms: u64,
}

impl Blob {
    fn of(guid: Guid, m: BlobMeta) -> Self {
        Self { guid, incarnation: m.incarnation, replication: m.replication, size_tracts: m.size_tracts, created_ms: m.created_ms }
    }
}

/// A client of the cluster's striped blobs; cheap to share (`Arc`).
pub struct TractClient {
    seeds: Vec<Client>,
    opts: ClientOptions,
    scheme: &'static str,
    map: RwLock<Arc<ClusterMap>>,
    nodes: Mutex<HashMap<NodeId, Client>>,
    limit: Arc<tokio::sync::Semaphore>,
    limit_n: usize,
    /// The hybrid clock versions are drawn from (ms, pushed past any
    /// version seen), and this client's tag in their low 16 bits.
    clock: AtomicU64,
    tag: u16,
}

/// One answer of one node, sorted by what the client does with it.
enum Answer<T> {
    Done(T),
    /// Refresh the map and retry.
    Refresh(TractError),
    /// Try another replica, or retry later.
    Elsewhere(TractError),
    /// Give up.
    Fail(TractError),
}

fn classify<T>(node: &str, r: Result<T, ClientError>) -> Answer<T> {
    match r {
        Ok(v) => Answer::Done(v),
        Err(ClientError::Api { code, .. }) if code == "StaleRow" || code == "NotHere" || code == "NotPrimary" || code == "NoTractTable" => {
            Answer::Refresh(TractError::Unreachable { node: node.into(), detail: format!("{code}: the client's table is out of date") })
        }
        Err(ClientError::Api { status, code, message }) if code == "Filling" || status == 503 => {
            Answer::Elsewhere(TractError::Unreachable { node: node.into(), detail: format!("{code}: {message}") })
        }
        Err(e @ ClientError::Transport(_)) => Answer::Elsewhere(TractError::Unreachable { node: node.into(), detail: e.to_string() }),
        Err(error) => Answer::Fail(TractError::Remote { node: node.into(), error }),
    }
}

impl TractClient {
    /// A client that reads the cluster map from the first of `seeds`
    /// (node URLs) that answers.
    pub async fn connect(seeds: &[String], opts: &ClientOptions) -> Result<Self, TractError> {
        if seeds.is_empty() {
            return Err(TractError::Invalid("no node to ask for the cluster map".into()));
        }
        let scheme = if seeds[0].starts_with("https") { "https" } else { "http" };
        let c = Self {
            seeds: seeds.iter().map(|s| Client::with_options(s, opts)).collect(),
            opts: opts.clone(),
            scheme,
            map: RwLock::new(Arc::new(ClusterMap::default())),
            nodes: Mutex::default(),
            limit: Arc::new(tokio::sync::Semaphore::new(0)),
            limit_n: 0,
            clock: AtomicU64::new(0),
            tag: rand::random(),
        };
        c.refresh().await?;
        let n = c.map().tract_simultaneous_limit();
        Ok(Self { limit: Arc::new(tokio::sync::Semaphore::new(n)), limit_n: n, ..c })
    }

    /// Reads the cluster map again, from the seeds or any node it names.
    pub async fn refresh(&self) -> Result<(), TractError> {
        let held = self.map();
        let mut tried: Vec<Client> = self.seeds.clone();
        tried.extend(held.nodes.values().map(|n| Client::with_options(&format!("{}://{}", self.scheme, n.addr), &self.opts)));
        let mut errors = Vec::new();
        for c in tried {
            match fetch_map(&c).await {
                Ok(m) => {
                    let mut cur = self.map.write().unwrap_or_else(|p| p.into_inner());
                    if m.epoch >= cur.epoch {
                        *cur = Arc::new(m);
                    }
                    return Ok(());
                }
                Err(e) => errors.push(format!("{}: {e}", c.base())),
            }
        }
        Err(TractError::Unreachable { node: "every node".into(), detail: format!("no node gave the cluster map: {}", errors.join("; ")) })
    }

    /// The map held.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The cluster's tract size.
    pub fn tract_bytes(&self) -> Result<u64, TractError> {
        self.map().tracts.as_ref().map(|t| t.tract_bytes).ok_or(TractError::NoTable)
    }

    /// How many tract reads and writes the cluster takes from one client
    /// at once (FDS's `GetSimultaneousLimit`); more wait their turn.
    pub fn simultaneous_limit(&self) -> usize {
        self.limit_n
    }

    /// A version above every one this client drew or saw.
    fn next_version(&self) -> u64 {
        let now = strata_types::Clock::now_ms(&strata_types::SystemClock);
        let mut cur = self.clock.load(Ordering::Relaxed);
        loop {
            let next = now.max(cur + 1);
            match self.clock.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return (next << 16) | u64::from(self.tag),
                Err(c) => cur = c,
            }
        }
    }

    fn saw_version(&self, v: u64) {
        self.clock.fetch_max(v >> 16, Ordering::AcqRel);
    }

    fn node(&self, map: &ClusterMap, loc: ReplicaLoc) -> Result<(String, Client), TractError> {
        let n = map.nodes.get(&loc.node).ok_or_else(|| TractError::Invalid(format!("the map names no node {}", loc.node)))?;
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let c = nodes.entry(loc.node).or_insert_with(|| Client::with_options(&format!("{}://{}", self.scheme, n.addr), &self.opts)).clone();
        Ok((n.addr.clone(), c))
    }

    fn route(&self, guid: &Guid, tract: u64, replication: u8) -> Result<(Arc<ClusterMap>, TractRoute), TractError> {
        let map = self.map();
        let route = map.tract_route(&guid.0, tract, usize::from(replication)).ok_or(TractError::NoTable)?;
        Ok((map, route))
    }

    /// Runs a metadata operation at the primary of the blob's metadata row
    /// (FDS §2.3), which applies it durably on every replica of the row
    /// before it answers. Retried after a map refresh when the node says
    /// the client's row is stale or that it is not the primary, and when
    /// the primary cannot be reached (it may be dead: the map soon names
    /// another). An operation whose answer was lost may have been applied:
    /// a retried create that finds the blob returns it, a retried delete
    /// that finds none is done, and a retried extend is applied again (the
    /// caller gets a later range; the first stays unwritten).
    async fn meta(&self, guid: &Guid, op: MetaOp) -> Result<BlobMeta, TractError> {
        let deadline = Instant::now() + RETRY_FOR;
        let mut pause = Duration::from_millis(20);
        let (mut op, mut lost) = (op, false);
        loop {
            let map = self.map();
            let replicas = map.tracts.as_ref().ok_or(TractError::NoTable)?.replicas as usize;
            let route = map.tract_route(&guid.0, METADATA_TRACT, replicas).ok_or(TractError::NoTable)?;
            let answer = match route.primary {
                None => Answer::Elsewhere(TractError::Unreachable { node: format!("row {}", route.partition), detail: "no replica of the row serves".into() }),
                Some(primary) => {
                    let (addr, c) = self.node(&map, primary)?;
                    let body = serde_json::to_vec(&op).map_err(|e| TractError::Invalid(e.to_string()))?;
                    let headers = [(ROW_VERSION_HEADER, route.version.to_string()), ("content-type", "application/json".to_string())];
                    let r = async {
                        let resp = c.send(http::Method::POST, &format!("/tract/{guid}"), &headers, strata_client::full(body)).await?;
                        let bytes = resp.bytes().await?;
                        serde_json::from_slice::<BlobMeta>(&bytes).map_err(|e| ClientError::Protocol(format!("blob metadata: {e}")))
                    }
                    .await;
                    classify(&addr, r)
                }
            };
            let code = |a: &Answer<BlobMeta>| match a {
                Answer::Fail(TractError::Remote { error: ClientError::Api { code, .. }, .. }) => Some(code.clone()),
                _ => None,
            };
            match (code(&answer).as_deref(), answer) {
                (_, Answer::Done(m)) => return Ok(m),
                (Some("BlobExists"), _) if lost && matches!(op, MetaOp::Create { .. }) => {
                    // Our own create, applied before its answer was lost.
                    op = MetaOp::Open;
                    continue;
                }
                (Some("NoSuchBlob"), _) if lost && op == MetaOp::Delete => {
                    return Ok(BlobMeta { deleted: true, replication: 0, size_tracts: 0, created_ms: 0, incarnation: 0 });
                }
                (Some("NoSuchBlob"), _) => return Err(TractError::NoSuchBlob(guid.to_string())),
                (Some("BlobExists"), _) => return Err(TractError::BlobExists(guid.to_string())),
                (_, Answer::Fail(e)) => return Err(e),
                (_, Answer::Refresh(e)) => self.backoff(&mut pause, deadline).await.map_err(|()| e)?,
                (_, Answer::Elsewhere(e)) => {
                    // An unreachable primary may have applied it before it went.
                    lost = true;
                    self.backoff(&mut pause, deadline).await.map_err(|()| e)?;
                }
            }
        }
    }

    /// Waits `pause` (doubled for next time, up to a second) and reads the
    /// map again; `Err` when that would pass `deadline`.
    async fn backoff(&self, pause: &mut Duration, deadline: Instant) -> Result<(), ()> {
        if Instant::now() + *pause > deadline {
            return Err(());
        }
        tokio::time::sleep(*pause).await;
        *pause = (*pause * 2).min(Duration::from_secs(1));
        let _ = self.refresh().await;
        Ok(())
    }

    /// Creates a blob of size 0 (FDS's `CreateBlob`) with `replication`
    /// replicas of each tract (the table's row width when `None`).
    pub async fn create_blob(&self, guid: &Guid, replication: Option<u8>) -> Result<Blob, TractError> {
        let max = self.map().tracts.as_ref().ok_or(TractError::NoTable)?.replicas;
        let replication = replication.unwrap_or(u8::try_from(max).unwrap_or(u8::MAX));
        Ok(Blob::of(*guid, self.meta(guid, MetaOp::Create { replication }).await?))
    }

    /// Opens a blob: its incarnation, replication and current size
    /// (FDS's `OpenBlob` and `GetBlobSize`).
    pub async fn open_blob(&self, guid: &Guid) -> Result<Blob, TractError> {
        Ok(Blob::of(*guid, self.meta(guid, MetaOp::Open).await?))
    }

    /// Deletes a blob (FDS's `DeleteBlob`); its tracts become orphans and
    /// a later create of the GUID starts empty.
    pub async fn delete_blob(&self, guid: &Guid) -> Result<(), TractError> {
        self.meta(guid, MetaOp::Delete).await.map(|_| ())
    }

    /// Grows a blob by `tracts` (FDS's `ExtendBlobSize`): the blob with its
    /// new size, whose last `tracts` tracts are the caller's to write.
    pub async fn extend_blob(&self, guid: &Guid, tracts: u64) -> Result<Blob, TractError> {
        Ok(Blob::of(*guid, self.meta(guid, MetaOp::Extend { tracts }).await?))
    }

    /// Checks that `tract` is inside the blob, asking its metadata again
    /// when it is beyond the size `blob` knows.
    async fn in_range(&self, blob: &Blob, tract: u64) -> Result<(), TractError> {
        if tract < blob.size_tracts {
            return Ok(());
        }
        let now = self.open_blob(&blob.guid).await?;
        if now.incarnation != blob.incarnation {
            return Err(TractError::NoSuchBlob(format!("{} (incarnation {}; deleted since)", blob.guid, blob.incarnation)));
        }
        if tract < now.size_tracts {
            return Ok(());
        }
        Err(TractError::OutOfRange { guid: blob.guid.to_string(), tract, size: now.size_tracts })
    }

    /// Writes a whole tract (at most the tract size; a shorter write is the
    /// whole tract, shorter) to every disk of its row; done when all have
    /// it durably. The version written, which every replica now holds (or
    /// a newer one, from a concurrent writer). The tract must be inside
    /// the blob (extend it first).
    pub async fn write_tract(&self, blob: &Blob, tract: u64, data: Bytes) -> Result<u64, TractError> {
        let max = self.tract_bytes()?;
        if data.len() as u64 > max {
            return Err(TractError::TooLarge { size: data.len() as u64, max });
        }
        self.in_range(blob, tract).await?;
        let guid = &blob.guid;
        let _permit = self.limit.acquire().await.map_err(|_| TractError::Invalid("client closed".into()))?;
        let version = self.next_version();
        let deadline = Instant::now() + RETRY_FOR;
        let mut pause = Duration::from_millis(20);
        loop {
            let (map, route) = self.route(guid, tract, blob.replication)?;
            let path = format!("/tract/{guid}/{tract}");
            let sends = route.write.iter().map(|loc| {
                let (path, data) = (path.clone(), data.clone());
                let target = self.node(&map, *loc);
                async move {
                    let (addr, c) = match target {
                        Ok(t) => t,
                        Err(e) => return Answer::Fail(e),
                    };
                    let headers = [
                        (ROW_VERSION_HEADER, route.version.to_string()),
                        (TRACT_VERSION_HEADER, version.to_string()),
                        (INCARNATION_HEADER, blob.incarnation.to_string()),
                    ];
                    let r = c.send(http::Method::PUT, &path, &headers, strata_client::full(data)).await;
                    classify(&addr, r.and_then(|resp| newest_of(&resp)))
                }
            });
            let answers = futures_util::future::join_all(sends).await;
            let mut retry = None;
            for a in answers {
                match a {
                    Answer::Done(newest) => self.saw_version(newest),
                    Answer::Fail(e) => return Err(e),
                    Answer::Refresh(e) | Answer::Elsewhere(e) => retry = Some(e),
                }
            }
            let Some(e) = retry else { return Ok(version) };
            tracing::debug!(%guid, tract, error = %e, "tract write retried");
            self.backoff(&mut pause, deadline).await.map_err(|()| e)?;
        }
    }

    /// Reads the newest version of a tract from one disk of its row, chosen
    /// at random, and from the others if it cannot answer. A tract inside
    /// the blob that was never written is `NotFound`.
    pub async fn read_tract(&self, blob: &Blob, tract: u64) -> Result<Bytes, TractError> {
        self.in_range(blob, tract).await?;
        let guid = &blob.guid;
        let _permit = self.limit.acquire().await.map_err(|_| TractError::Invalid("client closed".into()))?;
        let deadline = Instant::now() + RETRY_FOR;
        let mut pause = Duration::from_millis(20);
        loop {
            let (map, route) = self.route(guid, tract, blob.replication)?;
            let mut order = route.read.clone();
            rand::seq::SliceRandom::shuffle(order.as_mut_slice(), &mut rand::rng());
            let path = format!("/tract/{guid}/{tract}");
            let mut last = TractError::Unreachable { node: format!("row {}", route.partition), detail: "no replica of the row serves".into() };
            for loc in order {
                let (addr, c) = self.node(&map, loc)?;
                let headers = [(ROW_VERSION_HEADER, route.version.to_string()), (INCARNATION_HEADER, blob.incarnation.to_string())];
                let r = c.send(http::Method::GET, &path, &headers, strata_client::full(Bytes::new())).await;
                let r = match r {
                    Ok(resp) => match newest_of(&resp) {
                        Ok(v) => resp.bytes().await.map(|b| (v, b)),
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                };
                match classify(&addr, r) {
                    Answer::Done((v, bytes)) => {
                        self.saw_version(v);
                        return Ok(bytes);
                    }
                    Answer::Fail(TractError::Remote { error: ClientError::Api { status: 404, .. }, .. }) => {
                        return Err(TractError::NotFound { guid: guid.to_string(), tract });
                    }
                    Answer::Fail(e) => return Err(e),
                    Answer::Refresh(e) => {
                        // Refused under an old table: read the map before the next.
                        last = e;
                        break;
                    }
                    Answer::Elsewhere(e) => last = e,
                }
            }
            self.backoff(&mut pause, deadline).await.map_err(|()| last)?;
        }
    }
}

/// The newest version a replica says it holds.
fn newest_of(resp: &strata_client::Response) -> Result<u64, ClientError> {
    resp.head
        .headers
        .get(TRACT_VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ClientError::Protocol(format!("no {TRACT_VERSION_HEADER} in the answer")))
}

async fn fetch_map(c: &Client) -> Result<ClusterMap, String> {
    let r = c.send(http::Method::GET, "/meta/v1/map", &[], strata_client::full(Bytes::new())).await.map_err(|e| e.to_string())?;
    strata_cluster::decode_map(&r.bytes().await.map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

//! The client library: transactions over Týr blobs (Týr §IV-A).
//!
//! A [`Transaction`] buffers its writes, appends and atomic adds until
//! [`Transaction::commit`]. Its first read of a blob goes through one of
//! the blob's version managers, which answers the blob's latest version
//! (size, chunk size, commit sequence) with the chunks read as of it;
//! later reads of the blob go straight to a replica of each chunk's row,
//! as of that version, so every read of a blob in a transaction sees one
//! blob version, and reads of the transaction's own writes see them.
//!
//! Commit runs the chain: a step at each hop's row primary, in the global
//! order (version managers first, then chunk rows, each by row), the last
//! one deciding; then the decision back down the chain. A conflict aborts
//! the transaction, with no effect; the caller may run it again.

use crate::error::TxnError;
use crate::model::{
    ChunkData, ChunkRead, Decision, Finish, Guid, Hop, Item, Op, Read, Resolve, Snapshot, Step, StepAnswer, TxnId, VmAnswer, VmRead, Write, decode, encode,
    guid_of,
};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use strata_client::{Client, ClientError, ClientOptions};
use strata_cluster::{ClusterMap, METADATA_TRACT, NodeId};

/// How long one request keeps retrying through map refreshes and
/// unreachable nodes.
const RETRY_FOR: Duration = Duration::from_secs(20);

/// Where a request goes on a row.
#[derive(Clone, Copy)]
enum Target {
    /// The row's primary (steps, decisions, questions to a decider).
    Primary,
    /// Any replica that serves reads, at random.
    AnyReader,
}

/// A client of Týr's transactions; share it (`Arc`).
pub struct TxnClient {
    seeds: Vec<Client>,
    opts: ClientOptions,
    scheme: &'static str,
    map: RwLock<Arc<ClusterMap>>,
    nodes: Mutex<HashMap<NodeId, Client>>,
    chunk_bytes: u64,
    timings: Timings,
}

/// Where this client's transactions spent their time, summed over every
/// transaction (nanoseconds), for a benchmark to say where commit time goes.
#[derive(Debug, Default)]
pub struct Timings {
    /// Reads through version managers and of chunks.
    pub reads_ns: AtomicU64,
    /// Forward-pass steps before the decider.
    pub forward_ns: AtomicU64,
    /// The decider's step (validation, the decision, its installs).
    pub decide_ns: AtomicU64,
    /// The backward pass.
    pub backward_ns: AtomicU64,
    /// Hops of committed transactions, summed.
    pub hops: AtomicU64,
    /// Transactions committed.
    pub commits: AtomicU64,
}

fn since(t: Instant) -> u64 {
    t.elapsed().as_nanos() as u64
}

/// What a request's answer says the client should do.
enum Next<T> {
    Done(T),
    Retry(TxnError),
    Fail(TxnError),
}

fn classify<T>(node: &str, r: Result<T, ClientError>) -> Next<T> {
    match r {
        Ok(v) => Next::Done(v),
        Err(ClientError::Api { code, message, .. })
            if matches!(code.as_str(), "StaleRow" | "NotPrimary" | "NotHere" | "NoTractTable" | "Unreachable" | "Filling") =>
        {
            Next::Retry(TxnError::Unreachable { node: node.into(), detail: format!("{code}: {message}") })
        }
        Err(ClientError::Api { status: 503, code, message }) => Next::Retry(TxnError::Unreachable { node: node.into(), detail: format!("{code}: {message}") }),
        Err(e @ ClientError::Transport(_)) => Next::Retry(TxnError::Unreachable { node: node.into(), detail: e.to_string() }),
        Err(ClientError::Api { code, message, .. }) if code == "TxnConflict" => Next::Fail(TxnError::Conflict(message)),
        Err(ClientError::Api { code, message, .. }) if code == "InvalidArgument" => Next::Fail(TxnError::Invalid(message)),
        Err(ClientError::Api { code, message, .. }) if code == "SnapshotTooOld" => Next::Fail(TxnError::Conflict(message)),
        Err(e) => Next::Fail(TxnError::Unreachable { node: node.into(), detail: e.to_string() }),
    }
}

impl TxnClient {
    /// A client that reads the cluster map from the first of `seeds` that
    /// answers, and gives the blobs it creates chunks of `chunk_bytes`.
    pub async fn connect(seeds: &[String], opts: &ClientOptions, chunk_bytes: u64) -> Result<Arc<Self>, TxnError> {
        if seeds.is_empty() {
            return Err(TxnError::Invalid("no node to ask for the cluster map".into()));
        }
        if !(8..=64 << 20).contains(&chunk_bytes) {
            return Err(TxnError::Invalid(format!("chunk size {chunk_bytes}: want 8 bytes to 64 MiB")));
        }
        let scheme = if seeds[0].starts_with("https") { "https" } else { "http" };
        let c = Self {
            seeds: seeds.iter().map(|s| Client::with_options(s, opts)).collect(),
            opts: opts.clone(),
            scheme,
            map: RwLock::new(Arc::new(ClusterMap::default())),
            nodes: Mutex::default(),
            chunk_bytes,
            timings: Timings::default(),
        };
        c.refresh().await?;
        Ok(Arc::new(c))
    }

    /// Where this client's transactions spent their time.
    pub fn timings(&self) -> &Timings {
        &self.timings
    }

    /// The chunk size of the blobs this client creates.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunk_bytes
    }

    /// Reads the cluster map again, from the seeds or any node it names.
    pub async fn refresh(&self) -> Result<(), TxnError> {
        let held = self.map();
        let mut tried: Vec<Client> = self.seeds.clone();
        tried.extend(held.nodes.values().map(|n| Client::with_options(&format!("{}://{}", self.scheme, n.addr), &self.opts)));
        let mut errors = Vec::new();
        for c in tried {
            let got = async {
                let r = c.send(http::Method::GET, "/meta/v1/map", &[], strata_client::full(Bytes::new())).await.map_err(|e| e.to_string())?;
                strata_cluster::decode_map(&r.bytes().await.map_err(|e| e.to_string())?).map_err(|e| e.to_string())
            };
            match got.await {
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
        Err(TxnError::Unreachable { node: "every node".into(), detail: format!("no node gave the cluster map: {}", errors.join("; ")) })
    }

    /// The map held.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The row of a blob's version managers.
    fn vm_row(map: &ClusterMap, g: &Guid) -> Result<u64, TxnError> {
        map.tract_partition(g, METADATA_TRACT).ok_or(TxnError::NoTable)
    }

    /// The row of chunk `i` of a blob.
    fn chunk_row(map: &ClusterMap, g: &Guid, i: u64) -> Result<u64, TxnError> {
        map.tract_partition(g, i).ok_or(TxnError::NoTable)
    }

    /// The node a request on `row` goes to, with the row's version.
    fn pick(&self, map: &ClusterMap, row: u64, target: Target) -> Result<(String, Client, u64), TxnError> {
        let n = map.tracts.as_ref().ok_or(TxnError::NoTable)?.replicas as usize;
        let route = map.row_route(row, n).ok_or(TxnError::NoTable)?;
        let loc = match target {
            Target::Primary => route.primary,
            Target::AnyReader => {
                let r = &route.read;
                (!r.is_empty()).then(|| r[rand::random_range(0..r.len())])
            }
        }
        .ok_or_else(|| TxnError::Unreachable { node: format!("row {row}"), detail: "no replica of the row serves".into() })?;
        let addr = map
            .nodes
            .get(&loc.node)
            .map(|n| n.addr.clone())
            .ok_or_else(|| TxnError::Unreachable { node: format!("node {}", loc.node), detail: "not in the map".into() })?;
        let c = self
            .nodes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(loc.node)
            .or_insert_with(|| Client::with_options(&format!("{}://{addr}", self.scheme), &self.opts))
            .clone();
        Ok((addr, c, route.version))
    }

    /// Sends `make(row_version)` to `row`, retrying through map refreshes
    /// and unreachable nodes for a while.
    async fn call<A: for<'a> Deserialize<'a>, R: Serialize>(&self, path: &str, row: u64, target: Target, make: impl Fn(u64) -> R) -> Result<A, TxnError> {
        self.call_with(path, &[], row, target, make).await
    }

    /// [`call`](Self::call) with request headers.
    async fn call_with<A: for<'a> Deserialize<'a>, R: Serialize>(
        &self,
        path: &str,
        headers: &[(&str, String)],
        row: u64,
        target: Target,
        make: impl Fn(u64) -> R,
    ) -> Result<A, TxnError> {
        let deadline = Instant::now() + RETRY_FOR;
        let mut pause = Duration::from_millis(20);
        loop {
            let map = self.map();
            let last = match self.pick(&map, row, target) {
                Ok((addr, c, version)) => {
                    let body = Bytes::from(encode(&make(version)));
                    let r = async {
                        let resp = c.send(http::Method::POST, path, headers, strata_client::full(body)).await?;
                        resp.bytes().await
                    }
                    .await;
                    match classify(&addr, r) {
                        Next::Done(b) => return decode(&b),
                        Next::Fail(e) => return Err(e),
                        Next::Retry(e) => e,
                    }
                }
                Err(TxnError::NoTable) => return Err(TxnError::NoTable),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(last);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
            let _ = self.refresh().await;
        }
    }

    /// A read through `g`'s version manager, for transaction `txn` (which
    /// it then counts as a user of the blob version until it is decided)
    /// or outside one.
    async fn vm_read(&self, g: &Guid, offset: u64, len: u64, txn: Option<TxnId>) -> Result<VmAnswer, TxnError> {
        let (t, row) = (Instant::now(), Self::vm_row(&self.map(), g)?);
        let headers: Vec<(&str, String)> = txn.iter().map(|id| (crate::TXN_HEADER, id.to_string())).collect();
        let r = self.call_with("/txn/vm-read", &headers, row, Target::Primary, |row_version| VmRead { guid: *g, row_version, offset, len }).await;
        self.timings.reads_ns.fetch_add(since(t), Ordering::Relaxed);
        r
    }

    async fn chunk_read(&self, g: &Guid, index: u64, as_of: u64, taken_ms: u64) -> Result<ChunkData, TxnError> {
        let (t, row) = (Instant::now(), Self::chunk_row(&self.map(), g, index)?);
        let r = self.call("/txn/chunk", row, Target::AnyReader, |row_version| ChunkRead { guid: *g, index, as_of, taken_ms, row_version }).await;
        self.timings.reads_ns.fetch_add(since(t), Ordering::Relaxed);
        r
    }

    /// Reads `len` bytes at `offset` of blob `name` (fewer at its end)
    /// outside a transaction: one blob version, through a version manager.
    pub async fn read(&self, name: &str, offset: u64, len: u64) -> Result<Vec<u8>, TxnError> {
        let a = self.vm_read(&guid_of(name), offset, len, None).await?;
        Ok(assemble(&a.snapshot, &a.chunks.into_iter().map(|c| (c.index, c.data)).collect(), offset, len, a.snapshot.size))
    }

    /// The size of blob `name` (0 when never written).
    pub async fn size(&self, name: &str) -> Result<u64, TxnError> {
        Ok(self.vm_read(&guid_of(name), 0, 0, None).await?.snapshot.size)
    }

    /// A new transaction.
    pub fn begin(self: &Arc<Self>) -> Transaction {
        Transaction { client: self.clone(), id: TxnId::random(), views: HashMap::new(), reads: BTreeMap::new(), ops: Vec::new() }
    }
}

/// The bytes `[offset, offset+len)` of a blob of `size` bytes from its chunks.
fn assemble(snap: &Snapshot, chunks: &HashMap<u64, Vec<u8>>, offset: u64, len: u64, size: u64) -> Vec<u8> {
    let end = offset.saturating_add(len).min(size);
    if end <= offset {
        return Vec::new();
    }
    let cb = snap.chunk_bytes.max(1);
    let mut out = vec![0u8; (end - offset) as usize];
    for (i, data) in chunks {
        let start = i * cb;
        for (j, b) in data.iter().enumerate() {
            let at = start + j as u64;
            if at >= offset && at < end {
                out[(at - offset) as usize] = *b;
            }
        }
    }
    out
}

/// A blob as a transaction sees it.
struct View {
    snap: Snapshot,
    /// When the version manager took it.
    taken_ms: u64,
    /// Chunks read, as of the snapshot.
    chunks: HashMap<u64, Vec<u8>>,
}

/// A write the transaction buffers.
#[derive(Debug, Clone)]
enum Pending {
    Put { offset: u64, data: Vec<u8> },
    Add { offset: u64, delta: i64 },
}

impl Pending {
    fn end(&self) -> u64 {
        match self {
            Self::Put { offset, data } => offset + data.len() as u64,
            Self::Add { offset, .. } => offset + 8,
        }
    }
}

/// The chain's hops, each with what the transaction reads and writes there.
type Plan = BTreeMap<Hop, (Vec<Read>, Vec<Write>)>;

/// One transaction (`BEGIN` … `COMMIT`/`ABORT`).
pub struct Transaction {
    client: Arc<TxnClient>,
    id: TxnId,
    views: HashMap<Guid, View>,
    reads: BTreeMap<Item, u64>,
    ops: Vec<(Guid, Pending)>,
}

impl Transaction {
    /// Its id.
    pub fn id(&self) -> TxnId {
        self.id
    }

    fn chunk_bytes_of(&self, g: &Guid) -> u64 {
        self.views.get(g).map(|v| v.snap.chunk_bytes).filter(|c| *c > 0).unwrap_or(self.client.chunk_bytes)
    }

    /// The blob's view, read through a version manager the first time.
    async fn view(&mut self, g: &Guid, offset: u64, len: u64) -> Result<(), TxnError> {
        if self.views.contains_key(g) {
            return Ok(());
        }
        let a = self.client.vm_read(g, offset, len, Some(self.id)).await?;
        self.reads.insert(Item::Blob(*g), a.snapshot.size);
        let mut chunks = HashMap::new();
        for c in a.chunks {
            self.reads.insert(Item::Chunk(*g, c.index), c.version);
            chunks.insert(c.index, c.data);
        }
        self.views.insert(*g, View { snap: a.snapshot, taken_ms: a.taken_ms, chunks });
        Ok(())
    }

    /// The size of the blob as this transaction sees it (its own writes included).
    fn size_seen(&self, g: &Guid) -> u64 {
        let base = self.views.get(g).map_or(0, |v| v.snap.size);
        self.ops.iter().filter(|(og, _)| og == g).map(|(_, p)| p.end()).fold(base, u64::max)
    }

    /// Reads `len` bytes at `offset` of blob `name`: fewer at its end, its
    /// own writes included.
    pub async fn read(&mut self, name: &str, offset: u64, len: u64) -> Result<Vec<u8>, TxnError> {
        let g = guid_of(name);
        self.view(&g, offset, len).await?;
        let size = self.size_seen(&g);
        let end = offset.saturating_add(len).min(size);
        if end <= offset {
            return Ok(Vec::new());
        }
        let v = &self.views[&g];
        let (snap, taken, cb) = (v.snap, v.taken_ms, self.chunk_bytes_of(&g));
        // Chunks of the range not read yet: straight to their rows, as of the blob version.
        let stored_end = end.min(snap.size);
        if stored_end > offset {
            for i in offset / cb..=(stored_end - 1) / cb {
                if self.views[&g].chunks.contains_key(&i) {
                    continue;
                }
                let c = self.client.chunk_read(&g, i, snap.version, taken).await?;
                self.reads.insert(Item::Chunk(g, i), c.version);
                if let Some(v) = self.views.get_mut(&g) {
                    v.chunks.insert(i, c.data);
                }
            }
        }
        let snap_cb = Snapshot { chunk_bytes: cb, ..snap };
        let mut out = assemble(&snap_cb, &self.views[&g].chunks, offset, end - offset, snap.size);
        out.resize((end - offset) as usize, 0);
        // Own writes over it, in order; an add needs the chunk it adds to.
        for (og, p) in self.ops.clone() {
            if og != g {
                continue;
            }
            match p {
                Pending::Put { offset: o, data } => {
                    for (j, b) in data.iter().enumerate() {
                        let at = o + j as u64;
                        if at >= offset && at < end {
                            out[(at - offset) as usize] = *b;
                        }
                    }
                }
                Pending::Add { offset: o, delta } => {
                    if o + 8 <= offset || o >= end {
                        continue;
                    }
                    // The value added to, as stored (reads it, so it is validated).
                    let before = Box::pin(self.read_stored(&g, o, 8)).await?;
                    let mut cur = [0u8; 8];
                    for (k, c) in cur.iter_mut().enumerate() {
                        let at = o + k as u64;
                        *c = if at >= offset && at < end { out[(at - offset) as usize] } else { before.get(k).copied().unwrap_or(0) };
                    }
                    let v = i64::from_le_bytes(cur).wrapping_add(delta).to_le_bytes();
                    for (k, b) in v.iter().enumerate() {
                        let at = o + k as u64;
                        if at >= offset && at < end {
                            out[(at - offset) as usize] = *b;
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Stored bytes only (no own writes), read into the view.
    async fn read_stored(&mut self, g: &Guid, offset: u64, len: u64) -> Result<Vec<u8>, TxnError> {
        let (snap, taken) = (self.views[g].snap, self.views[g].taken_ms);
        let cb = self.chunk_bytes_of(g);
        let end = (offset + len).min(snap.size);
        if end > offset {
            for i in offset / cb..=(end - 1) / cb {
                if !self.views[g].chunks.contains_key(&i) {
                    let c = self.client.chunk_read(g, i, snap.version, taken).await?;
                    self.reads.insert(Item::Chunk(*g, i), c.version);
                    if let Some(v) = self.views.get_mut(g) {
                        v.chunks.insert(i, c.data);
                    }
                }
            }
        }
        let snap_cb = Snapshot { chunk_bytes: cb, ..snap };
        Ok(assemble(&snap_cb, &self.views[g].chunks, offset, len, snap.size))
    }

    /// The size of blob `name` as this transaction sees it.
    pub async fn size(&mut self, name: &str) -> Result<u64, TxnError> {
        let g = guid_of(name);
        self.view(&g, 0, 0).await?;
        Ok(self.size_seen(&g))
    }

    /// Writes `data` at `offset` of blob `name` (buffered until commit).
    pub fn write(&mut self, name: &str, offset: u64, data: &[u8]) {
        self.ops.push((guid_of(name), Pending::Put { offset, data: data.to_vec() }));
    }

    /// Appends `data` to blob `name`; the offset it lands at.
    pub async fn append(&mut self, name: &str, data: &[u8]) -> Result<u64, TxnError> {
        let g = guid_of(name);
        self.view(&g, 0, 0).await?;
        let at = self.size_seen(&g);
        self.ops.push((g, Pending::Put { offset: at, data: data.to_vec() }));
        Ok(at)
    }

    /// Adds `delta` to the little-endian 64-bit integer at `offset` of blob
    /// `name`, on the server at commit (no read).
    pub fn add(&mut self, name: &str, offset: u64, delta: i64) -> Result<(), TxnError> {
        let g = guid_of(name);
        let cb = self.chunk_bytes_of(&g);
        if offset % cb + 8 > cb {
            return Err(TxnError::Invalid(format!("an atomic add at {offset} would straddle two chunks of {cb} bytes")));
        }
        self.ops.push((g, Pending::Add { offset, delta }));
        Ok(())
    }

    /// The chain's hops, each with what it reads and writes.
    fn plan(&self, map: &ClusterMap) -> Result<Plan, TxnError> {
        let mut hops: BTreeMap<Hop, (Vec<Read>, Vec<Write>)> = BTreeMap::new();
        for (item, seen) in &self.reads {
            let hop = match item {
                Item::Blob(g) => Hop { chunks: false, row: TxnClient::vm_row(map, g)? },
                Item::Chunk(g, i) => Hop { chunks: true, row: TxnClient::chunk_row(map, g, *i)? },
            };
            hops.entry(hop).or_default().0.push(Read { item: *item, seen: *seen });
        }
        let mut per_item: BTreeMap<Item, (u64, Vec<Op>)> = BTreeMap::new();
        for (g, p) in &self.ops {
            let cb = self.chunk_bytes_of(g);
            let grow = per_item.entry(Item::Blob(*g)).or_insert((cb, Vec::new()));
            match grow.1.first_mut() {
                Some(Op::Grow { size, .. }) => *size = (*size).max(p.end()),
                _ => grow.1.push(Op::Grow { size: p.end(), chunk_bytes: cb }),
            }
            match p {
                Pending::Put { offset, data } => {
                    let mut at = *offset;
                    let mut rest = &data[..];
                    while !rest.is_empty() {
                        let (i, o) = (at / cb, at % cb);
                        let n = ((cb - o) as usize).min(rest.len());
                        per_item.entry(Item::Chunk(*g, i)).or_insert((cb, Vec::new())).1.push(Op::Put { offset: o, data: rest[..n].to_vec() });
                        rest = &rest[n..];
                        at += n as u64;
                    }
                }
                Pending::Add { offset, delta } => {
                    per_item.entry(Item::Chunk(*g, offset / cb)).or_insert((cb, Vec::new())).1.push(Op::Add { offset: offset % cb, delta: *delta });
                }
            }
        }
        for (item, (chunk_bytes, ops)) in per_item {
            let hop = match item {
                Item::Blob(g) => Hop { chunks: false, row: TxnClient::vm_row(map, &g)? },
                Item::Chunk(g, i) => Hop { chunks: true, row: TxnClient::chunk_row(map, &g, i)? },
            };
            hops.entry(hop).or_default().1.push(Write { item, ops, chunk_bytes });
        }
        Ok(hops)
    }

    async fn finish(&self, hop: Hop, decision: Decision) -> Result<(), TxnError> {
        let txn = self.id;
        self.client.call::<(), _>("/txn/finish", hop.row, Target::Primary, |row_version| Finish { txn, hop, row_version, decision }).await
    }

    async fn abort_hops(&self, hops: &[Hop]) {
        for hop in hops.iter().rev() {
            if let Err(e) = self.finish(*hop, Decision::Abort).await {
                tracing::debug!("abort of {} at row {}: {e} (its intent times out instead)", self.id, hop.row);
            }
        }
    }

    /// Commits: the commit sequence (0 for a transaction that wrote
    /// nothing), or [`TxnError::Conflict`] when it aborted with no effect,
    /// or [`TxnError::Unknown`] when its decision could not be learnt.
    pub async fn commit(self) -> Result<u64, TxnError> {
        if self.reads.is_empty() && self.ops.is_empty() {
            return Ok(0);
        }
        let map = self.client.map();
        let plan = self.plan(&map)?;
        let chain: Vec<Hop> = plan.keys().copied().collect();
        let read_only = self.ops.is_empty();
        let mut bound = 0u64;
        let last = chain.len() - 1;
        let mut seq = None;
        let timings = &self.client.timings;
        for (index, (hop, (reads, writes))) in plan.into_iter().enumerate() {
            let (txn, chain_c) = (self.id, chain.clone());
            let started = Instant::now();
            let answer = self
                .client
                .call::<StepAnswer, _>("/txn/step", hop.row, Target::Primary, |row_version| Step {
                    txn,
                    chain: chain_c.clone(),
                    index: index as u32,
                    row_version,
                    reads: reads.clone(),
                    writes: writes.clone(),
                    bound,
                    read_only,
                })
                .await;
            (if index == last { &timings.decide_ns } else { &timings.forward_ns }).fetch_add(since(started), Ordering::Relaxed);
            match answer {
                Ok(StepAnswer::Prepared { bound: b }) => bound = bound.max(b),
                Ok(StepAnswer::Committed { seq: s }) => seq = Some(s),
                Ok(StepAnswer::Aborted { reason }) => {
                    self.abort_hops(&chain[..index]).await;
                    return Err(TxnError::Conflict(reason));
                }
                Err(e) if index == last => {
                    // The decider may have decided: ask it (it decides Abort if not).
                    let hop = chain[last];
                    let r = self.client.call::<Decision, _>("/txn/resolve", hop.row, Target::Primary, |row_version| Resolve { txn, hop, row_version }).await;
                    match r {
                        Ok(Decision::Commit(s)) => seq = Some(s),
                        Ok(Decision::Abort) => {
                            self.abort_hops(&chain[..index]).await;
                            return Err(TxnError::Conflict(format!("the decider could not be reached in time ({e})")));
                        }
                        Err(e2) => return Err(TxnError::Unknown(format!("{e}; asking the decider again: {e2}"))),
                    }
                }
                Err(TxnError::Invalid(m)) => {
                    self.abort_hops(&chain[..=index]).await;
                    return Err(TxnError::Invalid(m));
                }
                Err(e) => {
                    self.abort_hops(&chain[..=index]).await;
                    return Err(TxnError::Conflict(format!("a participant could not be reached: {e}")));
                }
            }
        }
        let seq = seq.ok_or_else(|| TxnError::Unknown("the chain's last hop did not decide".into()))?;
        // The backward pass: every chunk hop at once, then every version
        // manager at once, so a version manager shows the new blob version
        // only once every chunk of it is installed.
        let me = &self;
        let started = Instant::now();
        for vm in [false, true] {
            let hops = chain[..last].iter().filter(|h| h.chunks != vm);
            let done = futures_util::future::join_all(hops.map(|hop| async move { (hop, me.finish(*hop, Decision::Commit(seq)).await) })).await;
            let mut all = true;
            for (hop, r) in done {
                if let Err(e) = r {
                    // Committed all the same: the hop's intent times out and
                    // its node finishes it with the decider's answer (and the
                    // version managers wait for that).
                    tracing::debug!("finish of {} at row {}: {e}", self.id, hop.row);
                    all = false;
                }
            }
            if !all {
                break;
            }
        }
        timings.backward_ns.fetch_add(since(started), Ordering::Relaxed);
        timings.hops.fetch_add(chain.len() as u64, Ordering::Relaxed);
        timings.commits.fetch_add(1, Ordering::Relaxed);
        Ok(seq)
    }

    /// Aborts: nothing was sent, so nothing is left behind.
    pub fn abort(self) {}
}

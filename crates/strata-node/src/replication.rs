//! Pull replication (Ambry §5). For every peer node that shares partitions
//! with this one, a task asks the peer — in one batched journal request for
//! all shared partitions — what its replicas hold after this node's token
//! for each, keeps what this replica lacks, fetches it, appends it, and
//! only then moves the token. The token is persisted at most once every
//! [`TOKEN_PERSIST_MS`] per replica: each write is a temp file, two fsyncs
//! and a rename, which every poll (every 100 ms per peer while blobs
//! arrive) made a large share of a busy node's work. A crash loses at most
//! that much progress, and nothing else: the blobs are here already, and
//! the next round finds them present and skips them. Intra-zone and inter-zone peers
//! run on separate thread pools with separate periods; partitions that lag
//! most are processed first.
//!
//! A put the peer wrote less than [`PUSH_GRACE_MS`] ago and this replica
//! lacks is not fetched yet: the router pushes every put to every replica
//! as it writes it, so that copy is almost always on its way (queued in
//! this node's writer, or crossing the network), and fetching it too sent
//! each such blob twice and wrote it twice (5-7% of the bytes of a 3- and
//! 6-node `strata bench-cluster` PUT phase were pulled copies of pushes in
//! flight). The token stops before the first such put; the next round looks
//! again, and fetches whatever is still missing once it is old enough.
//! Only replicas that pushes reach wait so: a serving replica of a blob
//! partition pulling from a peer in its zone. A move's new replica before
//! its promotion, a tract row's, and inter-zone pulls fetch at once (under
//! steady load, a waiting new replica would never catch up and promote).
//! Ages come from this node's own sightings of the peer's sequence numbers
//! (no clocks compared between nodes); entries it has no sighting to date
//! are fetched at once, so a node that starts or catches up never waits.
//!
//! Tokens live in `<replica dir>/replication.tokens` (a frame: peer node →
//! peer incarnation and sequence number). A token names the peer replica's
//! incarnation: when the peer's log was recreated, the token starts over.

use crate::node::ClusterNode;
use crate::worker::{Next, PassFailed};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strata_cluster::{NodeId, PartitionKind};
use strata_engine::{EngineError, KeyState, Replica, WriteOp};
use strata_format::RecordKind;
use strata_format::frame::{decode_frame, encode_frame};
use strata_rpc::{Fetched, JournalChunk, JournalItem};
use strata_types::{Clock, Key, PartitionId};

const TOKENS_FILE: &str = "replication.tokens";
/// Least time between two writes of one replica's tokens file.
pub const TOKEN_PERSIST_MS: u64 = 1_000;
const KIND_TOKENS: u16 = 0x30;
/// Journal entries asked per partition per round.
const JOURNAL_MAX: u32 = 2_000;
/// Bytes fetched per request.
const FETCH_BYTES: u64 = 16 << 20;
/// Keys fetched per request at most (sizes are unknown for index listings).
const FETCH_KEYS: usize = 128;
/// Fetches one peer's task keeps in flight: the next batches cross the
/// network while one is appended and fsync'd here.
const FETCHES_IN_FLIGHT: usize = 3;
/// How old a put must be on the peer before this replica fetches it when
/// it lacks it: longer than a pushed copy takes to arrive under load (PUT
/// p99 is 30-70 ms in `strata bench-cluster`), short beside the lag a
/// replica that missed a push can live with.
pub const PUSH_GRACE_MS: u64 = 1_000;
/// How soon a peer's task looks again when the map gives this node
/// replicas to pull from the peer but none is open yet.
const OPENING_RETRY: Duration = Duration::from_millis(10);

/// A chunk's fetches in flight, in order; dropped (an error, a cancelled
/// task) they stop.
struct Fetches(VecDeque<Fetching>);

/// One batch's fetch, running: its keys and what the peer answered.
type Fetching = tokio::task::JoinHandle<(Vec<Key>, Result<Vec<(Fetched, Bytes)>, strata_rpc::RpcError>)>;

impl Drop for Fetches {
    fn drop(&mut self) {
        for fetching in &self.0 {
            fetching.abort();
        }
    }
}

/// How far this replica has synced from one peer replica.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    /// The peer replica's incarnation when the token was taken.
    pub incarnation: [u8; 16],
    /// Every record of the peer up to this sequence number is here.
    pub lsn: u64,
}

/// Lag of one replica pair, as last measured.
#[derive(Debug, Clone, Serialize)]
pub struct PairLag {
    /// Partition.
    pub partition: PartitionId,
    /// Peer node.
    pub peer: NodeId,
    /// Whether the peer is in this node's zone.
    pub intra_zone: bool,
    /// Token.
    pub token_lsn: u64,
    /// The token as last written to the tokens file: where replication
    /// from this peer starts again after a crash.
    pub token_persisted_lsn: u64,
    /// The peer's last sequence number.
    pub peer_lsn: u64,
    /// Records the peer had beyond the token at the last poll.
    pub lag_records: u64,
    /// Their bytes (for a listing from the peer's index, the difference of
    /// the two logs' sizes).
    pub lag_bytes: u64,
    /// How long those records waited at most before being durable here:
    /// from the previous poll (when they were not there yet) to the end of
    /// this round. While the peer cannot be reached: time since the last
    /// successful round.
    pub lag_seconds: f64,
    /// The last error talking to the peer, if the last round failed.
    pub error: Option<String>,
    /// The peer's map epoch in its last answer.
    pub answer_epoch: u64,
    #[serde(skip)]
    last_ok_ms: u64,
}

impl PairLag {
    /// When the last round that succeeded ended (this node's clock, ms).
    pub fn last_ok_ms(&self) -> u64 {
        self.last_ok_ms
    }

    /// Whether the last round succeeded and applied everything the peer
    /// had when it answered.
    pub fn applied_all(&self) -> bool {
        self.error.is_none() && self.token_lsn >= self.peer_lsn
    }
}

/// When this node saw which of a peer replica's sequence numbers: the
/// answers of its last journal rounds, as (time received here, the peer's
/// last sequence number then), oldest first, for one incarnation.
#[derive(Debug, Default)]
struct Sightings {
    incarnation: [u8; 16],
    seen: VecDeque<(u64, u64)>,
}

impl Sightings {
    /// Books an answer received at `now_ms` in which the peer's last
    /// sequence number was `last_lsn`, keeping only what [`Self::young_above`]
    /// can still need.
    fn saw(&mut self, incarnation: [u8; 16], now_ms: u64, last_lsn: u64, grace_ms: u64) {
        if incarnation != self.incarnation {
            self.incarnation = incarnation;
            self.seen.clear();
        }
        self.seen.push_back((now_ms, last_lsn));
        // The newest sighting at least the grace old is the one that
        // counts; older ones never will again.
        let cutoff = now_ms.saturating_sub(grace_ms);
        while self.seen.len() > 1 && self.seen[1].0 <= cutoff {
            self.seen.pop_front();
        }
    }

    /// The sequence number above which the peer's records are known to be
    /// younger than `grace_ms` at `now_ms`: what it held at the newest
    /// sighting that old, or, without one, at the oldest sighting (the
    /// records after it came since, less than the grace ago). `None`: no
    /// sighting of this incarnation, so no age is known.
    fn young_above(&self, incarnation: [u8; 16], now_ms: u64, grace_ms: u64) -> Option<u64> {
        if incarnation != self.incarnation {
            return None;
        }
        let cutoff = now_ms.saturating_sub(grace_ms);
        let old_enough = self.seen.iter().rev().find(|(t, _)| *t <= cutoff);
        old_enough.or(self.seen.front()).map(|&(_, lsn)| lsn)
    }
}

/// Replication state of a node: lag per pair and counters.
pub struct Replication {
    clock: Arc<dyn Clock>,
    lag: Mutex<BTreeMap<(PartitionId, NodeId), PairLag>>,
    tokens: Mutex<HashMap<PartitionId, ReplicaTokens>>,
    /// Writes of tokens files.
    pub token_writes: AtomicU64,
    /// Puts being fetched per partition, by whichever peer task claimed
    /// them first: the other peers' tasks leave them alone, so a replica
    /// catching up from several peers fetches each blob once, from
    /// whichever peer gets to it first.
    inflight: Mutex<HashMap<PartitionId, BTreeSet<Key>>>,
    /// Each pair's sightings of the peer's sequence numbers, to age its
    /// records ([`PUSH_GRACE_MS`]).
    sightings: Mutex<HashMap<(PartitionId, NodeId), Sightings>>,
    /// Rounds that stopped at a missing put younger than
    /// [`PUSH_GRACE_MS`] (its pushed copy was on its way), leaving it and
    /// what follows for a later round.
    pub deferred_rounds: AtomicU64,
    /// Bytes of blob data copied from peers in this zone.
    pub bytes_intra: AtomicU64,
    /// Bytes of blob data copied from peers in other zones.
    pub bytes_inter: AtomicU64,
    /// Records applied (puts, deletes, TTL updates).
    pub records: AtomicU64,
}

impl Replication {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            lag: Mutex::new(BTreeMap::new()),
            tokens: Mutex::new(HashMap::new()),
            token_writes: AtomicU64::new(0),
            inflight: Mutex::new(HashMap::new()),
            sightings: Mutex::new(HashMap::new()),
            deferred_rounds: AtomicU64::new(0),
            bytes_intra: AtomicU64::new(0),
            bytes_inter: AtomicU64::new(0),
            records: AtomicU64::new(0),
        }
    }

    /// Lag of every pair, seconds brought up to date.
    pub fn lag(&self) -> Vec<PairLag> {
        let now = self.clock.now_ms();
        self.lag
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|l| {
                let mut l = l.clone();
                if l.error.is_some() {
                    l.lag_seconds = now.saturating_sub(l.last_ok_ms) as f64 / 1000.0;
                }
                l
            })
            .collect()
    }

    fn token(&self, replica: &Replica, peer: NodeId) -> Token {
        let mut g = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        let t = g.entry(replica.partition()).or_insert_with(|| ReplicaTokens::load(replica));
        t.peers.get(&peer).copied().unwrap_or_default()
    }

    /// Moves the token (call only once what it covers is durable here);
    /// writes the tokens file if it changed and was last written more than
    /// [`TOKEN_PERSIST_MS`] ago (a later call writes what this one left).
    /// Returns the peer's token as the file holds it now.
    fn set_token(&self, replica: &Replica, peer: NodeId, token: Token) -> std::io::Result<u64> {
        let now = self.clock.now_ms();
        let mut g = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        let t = g.entry(replica.partition()).or_insert_with(|| ReplicaTokens::load(replica));
        t.peers.insert(peer, token);
        if t.peers == t.persisted || now.saturating_sub(t.written_ms) < TOKEN_PERSIST_MS {
            return Ok(t.persisted.get(&peer).map_or(0, |t| t.lsn));
        }
        let payload = postcard::to_stdvec(&t.peers).map_err(std::io::Error::other)?;
        strata_engine::fsutil::write_atomic(&replica.dir().join(TOKENS_FILE), &encode_frame(KIND_TOKENS, &payload)).map_err(std::io::Error::other)?;
        self.token_writes.fetch_add(1, Ordering::Relaxed);
        t.written_ms = now;
        t.persisted = t.peers.clone();
        Ok(token.lsn)
    }

    fn record(&self, partition: PartitionId, peer: NodeId, intra_zone: bool, f: impl FnOnce(&mut PairLag)) {
        let now = self.clock.now_ms();
        let mut g = self.lag.lock().unwrap_or_else(|p| p.into_inner());
        let l = g.entry((partition, peer)).or_insert(PairLag {
            partition,
            peer,
            intra_zone,
            token_lsn: 0,
            token_persisted_lsn: 0,
            peer_lsn: 0,
            lag_records: 0,
            lag_bytes: 0,
            lag_seconds: 0.0,
            error: None,
            answer_epoch: 0,
            last_ok_ms: now,
        });
        l.intra_zone = intra_zone;
        f(l);
        if l.error.is_none() {
            l.last_ok_ms = now;
        }
    }

    /// The pair of this node's replica of `partition` and `peer`'s.
    pub fn pair(&self, partition: PartitionId, peer: NodeId) -> Option<PairLag> {
        self.lag.lock().unwrap_or_else(|p| p.into_inner()).get(&(partition, peer)).cloned()
    }

    fn young_above(&self, partition: PartitionId, peer: NodeId, incarnation: [u8; 16], now_ms: u64) -> Option<u64> {
        self.sightings.lock().unwrap_or_else(|p| p.into_inner()).get(&(partition, peer))?.young_above(incarnation, now_ms, PUSH_GRACE_MS)
    }

    fn saw(&self, partition: PartitionId, peer: NodeId, incarnation: [u8; 16], now_ms: u64, last_lsn: u64) {
        self.sightings.lock().unwrap_or_else(|p| p.into_inner()).entry((partition, peer)).or_default().saw(incarnation, now_ms, last_lsn, PUSH_GRACE_MS);
    }

    fn lag_of(&self, partition: PartitionId, peer: NodeId) -> u64 {
        self.lag.lock().unwrap_or_else(|p| p.into_inner()).get(&(partition, peer)).map_or(u64::MAX, |l| l.lag_records)
    }
}

/// Keys this task claimed for fetching; released when dropped.
struct Claims<'a> {
    rep: &'a Replication,
    partition: PartitionId,
    keys: Vec<Key>,
}

impl Replication {
    /// Claims `key` for fetching unless another task has.
    fn claim(&self, partition: PartitionId, key: &Key) -> bool {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner()).entry(partition).or_default().insert(key.clone())
    }
    fn in_flight(&self, partition: PartitionId, key: &Key) -> bool {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner()).get(&partition).is_some_and(|s| s.contains(key))
    }
}

impl Drop for Claims<'_> {
    fn drop(&mut self) {
        let mut g = self.rep.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = g.get_mut(&self.partition) {
            for k in &self.keys {
                set.remove(k);
            }
        }
    }
}

/// One replica's tokens, and whether the file is behind them.
struct ReplicaTokens {
    peers: BTreeMap<NodeId, Token>,
    /// As the file holds them (the file is behind while they differ).
    persisted: BTreeMap<NodeId, Token>,
    /// When the file was last written (0: not by this process).
    written_ms: u64,
}

impl ReplicaTokens {
    fn load(replica: &Replica) -> Self {
        let peers = load_tokens(replica);
        Self { persisted: peers.clone(), peers, written_ms: 0 }
    }
}

fn load_tokens(replica: &Replica) -> BTreeMap<NodeId, Token> {
    let path = replica.dir().join(TOKENS_FILE);
    let Ok(b) = std::fs::read(&path) else { return BTreeMap::new() };
    match decode_frame(&b).ok().filter(|(k, _)| *k == KIND_TOKENS).and_then(|(_, p)| postcard::from_bytes(p).ok()) {
        Some(t) => t,
        None => {
            // Starting over is always safe: replication filters what is here.
            tracing::warn!(path = %path.display(), "replication tokens unreadable; starting from the beginning");
            BTreeMap::new()
        }
    }
}

/// Starts replication: a manager worker that starts one worker per peer
/// node (`replication/<peer>`) on the intra- or inter-zone pool as the map
/// changes. A pool has two threads: a node catching up from several peers
/// decrypts, checks and applies their answers on two cores (with one, a
/// wiped node's catch-up on 3 nodes ran at 400-510 MB/s against 570-660).
pub(crate) fn spawn(node: &Arc<ClusterNode>) {
    let pool = |name: &str| -> &'static tokio::runtime::Runtime {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name(name).enable_all().build().expect("a replication thread pool");
        // The pools live as long as the process.
        Box::leak(Box::new(rt))
    };
    let (intra, inter) = (pool("strata-repl-intra"), pool("strata-repl-inter"));
    let mut running: BTreeSet<NodeId> = BTreeSet::new();
    let mut rx = node.subscribe();
    let node = node.clone();
    node.workers.clone().spawn("replication", Next::Now, move || {
        let map = rx.borrow_and_update().clone();
        let me = node.config.node_id;
        // Pairs this node no longer pulls (a move ended) leave the status.
        node.replication.lag.lock().unwrap_or_else(|p| p.into_inner()).retain(|(p, peer), _| sources(&map, *p, me).contains(peer));
        node.replication.sightings.lock().unwrap_or_else(|p| p.into_inner()).retain(|(p, peer), _| sources(&map, *p, me).contains(peer));
        if let Some(my_zone) = map.nodes.get(&me).map(|n| n.zone.clone()) {
            for peer in peers_of(&map, me) {
                if running.insert(peer) {
                    let same_zone = map.nodes.get(&peer).is_some_and(|n| n.zone == my_zone);
                    let pool = if same_zone { intra } else { inter };
                    let prev_poll_ms = Arc::new(AtomicU64::new(node.clock().now_ms()));
                    let node = node.clone();
                    node.workers
                        .clone()
                        .spawn_on(pool.handle(), format!("replication/{peer}"), Next::Now, move || poll_peer(node.clone(), peer, prev_poll_ms.clone()));
                }
            }
        }
        let next = Next::on_change(rx.clone());
        async move { Ok(next) }
    });
}

/// The nodes this node pulls partition `p` from: every other holder, but
/// not a move's destination before it is promoted (it has nothing the
/// replicas lack), and nothing at all for a replica that is leaving
/// (draining into its successor: it must stand still). A tract row's
/// replicas are written by the clients and pull only into a move's new
/// replica (FDS §3.2's copy after a failure, §3.4's after growth).
fn sources(map: &strata_cluster::ClusterMap, p: PartitionId, me: NodeId) -> Vec<NodeId> {
    let Some(part) = map.partitions.get(&p) else { return Vec::new() };
    let holders = map.holders(p);
    if !holders.iter().any(|r| r.node == me) {
        return Vec::new();
    }
    if part.kind == PartitionKind::Tract && part.moving.is_none_or(|m| m.to.node != me) {
        return Vec::new();
    }
    if let Some(m) = part.moving {
        if m.from.node == me && matches!(m.phase, strata_cluster::MovePhase::Draining { .. }) {
            return Vec::new();
        }
        let pending = (m.phase == strata_cluster::MovePhase::Filling).then_some(m.to.node);
        return holders.into_iter().map(|r| r.node).filter(|&n| n != me && Some(n) != pending).collect();
    }
    holders.into_iter().map(|r| r.node).filter(|&n| n != me).collect()
}

/// Every node this node pulls some partition from.
fn peers_of(map: &strata_cluster::ClusterMap, me: NodeId) -> BTreeSet<NodeId> {
    map.partitions.keys().flat_map(|&p| sources(map, p, me)).collect()
}

/// One poll of `peer`'s journals for the partitions both nodes hold: the
/// items it returns are applied here; at once again if it had more.
async fn poll_peer(node: Arc<ClusterNode>, peer: NodeId, prev_poll_ms: Arc<AtomicU64>) -> Result<Next, PassFailed> {
    let map = node.map();
    let me = node.config.node_id;
    let (Some(my), Some(their)) = (map.nodes.get(&me), map.nodes.get(&peer)) else {
        return Ok(Next::After(Duration::from_secs(1)));
    };
    let intra = my.zone == their.zone;
    let period = if intra { node.config.intra_period } else { node.config.inter_period };
    let addr = their.addr.clone();
    // Shared partitions whose local replica is open, most lagging first.
    let pulled: Vec<PartitionId> = map.partitions.values().filter(|p| sources(&map, p.id, me).contains(&peer)).map(|p| p.id).collect();
    let mut shared: Vec<(PartitionId, Arc<Replica>)> = pulled.iter().filter_map(|&p| node.disks.replica(p).map(|r| (p, r))).collect();
    let rep = &node.replication;
    // Equally lagging partitions (all of them, on a node that starts empty)
    // are taken in an order that starts at a different place for each peer,
    // so the peers' tasks fetch different partitions at once rather than
    // one waiting on the keys the other claimed. The sort is stable.
    let peers = peers_of(&map, me);
    let rank = peers.iter().position(|&n| n == peer).unwrap_or(0);
    let offset = rank * shared.len() / peers.len().max(1);
    shared.rotate_left(offset);
    shared.sort_by_key(|(p, _)| std::cmp::Reverse(rep.lag_of(*p, peer)));
    if shared.is_empty() {
        // Replicas the map gives this node still being created (a node that
        // has just joined or was wiped): their pulls start once they are
        // open, not a whole period later.
        return Ok(Next::After(if pulled.is_empty() { period } else { period.min(OPENING_RETRY) }));
    }
    let items: Vec<JournalItem> = shared.iter().map(|(p, r)| JournalItem { partition: *p, after_lsn: rep.token(r, peer).lsn, max: JOURNAL_MAX }).collect();
    let poll_ms = node.clock().now_ms();
    let (epoch, answers) = match node.rpc().journal(&addr, items).await {
        Ok((epoch, a)) => {
            node.saw_epoch(epoch);
            (epoch, a)
        }
        Err(e) => {
            for (p, _) in &shared {
                rep.record(*p, peer, intra, |l| l.error = Some(e.to_string()));
            }
            return Err(PassFailed::new(format!("journal of node {peer}: {e}"), period.max(Duration::from_millis(500))));
        }
    };
    let mut more = false;
    // This node's replicas that routers push puts to: a serving replica of
    // a blob partition. Of those, the puts a peer in this zone has and this
    // replica lacks are mostly on their way ([`PUSH_GRACE_MS`]). A move's
    // new replica before its promotion, a tract row's, or a put another
    // zone took (its routers push in their zone) gets none: those pull at once.
    let pushed = |p: PartitionId| {
        intra && map.partitions.get(&p).is_some_and(|part| part.kind == PartitionKind::Blob && part.replicas.iter().any(|r| r.node == me && map.serves(*r)))
    };
    let by_partition: HashMap<PartitionId, Arc<Replica>> = shared.into_iter().collect();
    let prev = prev_poll_ms.load(Ordering::Relaxed);
    for a in answers {
        let Some(replica) = by_partition.get(&a.partition) else { continue };
        match a.result {
            Ok(chunk) => match apply_chunk(&node, replica, Source { peer, addr: &addr, intra, pushed: pushed(a.partition) }, chunk, prev).await {
                Ok(behind) => {
                    more |= behind;
                    rep.record(a.partition, peer, intra, |l| l.answer_epoch = epoch);
                }
                Err(e) => rep.record(a.partition, peer, intra, |l| l.error = Some(e)),
            },
            Err(e) => rep.record(a.partition, peer, intra, |l| l.error = Some(e.to_string())),
        }
    }
    prev_poll_ms.store(poll_ms, Ordering::Relaxed);
    Ok(if more { Next::Now } else { Next::After(period) })
}

/// The peer a replica pulls from, as one round sees it.
struct Source<'a> {
    peer: NodeId,
    addr: &'a str,
    /// The peer is in this node's zone.
    intra: bool,
    /// Routers push puts to this replica (see `pushed` in [`poll_peer`]).
    pushed: bool,
}

/// Applies what the peer has after the token; returns whether the peer has
/// more right away.
async fn apply_chunk(node: &ClusterNode, replica: &Arc<Replica>, source: Source<'_>, chunk: JournalChunk, prev_poll_ms: u64) -> Result<bool, String> {
    let Source { peer, addr, intra, pushed } = source;
    let rep = &node.replication;
    let partition = replica.partition();
    let token = rep.token(replica, peer);
    if token.lsn > 0 && token.incarnation != chunk.incarnation {
        // The peer's log was recreated: start over (what is here is filtered).
        tracing::warn!(partition, peer, "peer replica has a new incarnation; replication restarts from its beginning");
        rep.set_token(replica, peer, Token { incarnation: chunk.incarnation, lsn: 0 }).map_err(|e| e.to_string())?;
        return Ok(true);
    }
    // Keep what this replica lacks, up to the first put it lacks that is
    // younger than the grace (its pushed copy is on its way).
    let now_ms = node.clock().now_ms();
    let young_above = if pushed && !chunk.from_index { rep.young_above(partition, peer, chunk.incarnation, now_ms) } else { None };
    let mut deferred_from: Option<u64> = None;
    let mut fetch: Vec<(Key, u32)> = Vec::new();
    let mut deletes: Vec<(Key, Option<Arc<str>>)> = Vec::new();
    // Who made the TTL updates copied here (their records name them too).
    let mut ttl_actors: BTreeMap<Key, Arc<str>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    let mut claims = Claims { rep, partition, keys: Vec::new() };
    // Puts another peer's task is fetching: checked before the token moves.
    let mut theirs: Vec<Key> = Vec::new();
    for e in &chunk.entries {
        let Some(key) = Key::from_encoded(&e.key) else { return Err(format!("peer {peer} sent a malformed key")) };
        let state = replica.state_of(&key);
        let kind = match e.kind {
            1 => RecordKind::Put,
            2 => RecordKind::Delete,
            3 => RecordKind::TtlUpdate,
            k => return Err(format!("peer {peer} sent record kind {k}")),
        };
        if kind == RecordKind::Put && state == KeyState::Missing && young_above.is_some_and(|above| e.lsn > above) {
            // Nothing past it is looked at: the token stops here.
            deferred_from = Some(e.lsn);
            break;
        }
        match (kind, state) {
            (RecordKind::Put, KeyState::Missing) if seen.insert(key.clone()) => {
                if rep.claim(partition, &key) {
                    claims.keys.push(key.clone());
                    fetch.push((key, e.record_len));
                } else {
                    theirs.push(key);
                }
            }
            (RecordKind::TtlUpdate, KeyState::Missing | KeyState::Live { .. }) if seen.insert(key.clone()) => {
                if let Some(a) = &e.actor {
                    ttl_actors.insert(key.clone(), Arc::from(a.as_str()));
                }
                fetch.push((key, e.record_len));
            }
            (RecordKind::Delete, KeyState::Missing | KeyState::Live { .. }) => deletes.push((key, e.actor.as_deref().map(Arc::from))),
            _ => {}
        }
    }
    // Fetch and append, in bounded batches, with the next batches' fetches
    // in flight while one is appended (its fsync waits here).
    let mut batches: Vec<(Vec<Key>, u64)> = Vec::new();
    for (key, len) in fetch {
        let len = len as u64;
        match batches.last_mut() {
            Some((keys, size)) if *size + len <= FETCH_BYTES && keys.len() < FETCH_KEYS => {
                keys.push(key);
                *size += len;
            }
            _ => batches.push((vec![key], len)),
        }
    }
    let mut batches = batches.into_iter();
    let mut inflight = Fetches(VecDeque::new());
    let mut bytes = 0u64;
    let mut applied = 0u64;
    loop {
        while inflight.0.len() < FETCHES_IN_FLIGHT {
            let Some((keys, size)) = batches.next() else { break };
            // The replicas a rebalancing fills here copy at the plan's pace, together.
            if let Some(rate) = node.move_throttle(partition) {
                node.pacer.wait(size, rate).await;
            }
            let (rpc, addr) = (node.rpc().clone(), addr.to_string());
            inflight.0.push_back(tokio::spawn(async move {
                let got = rpc.fetch(&addr, partition, &keys).await;
                (keys, got)
            }));
        }
        let Some(fetching) = inflight.0.pop_front() else { break };
        let (keys, got) = match fetching.await {
            Ok((keys, got)) => (keys, got.map_err(|e| e.to_string())?),
            Err(e) => return Err(format!("fetching from node {peer}: {e}")),
        };
        let mut pending = Vec::new();
        for (key, (state, data)) in keys.into_iter().zip(got) {
            match state {
                Fetched::Live(rec) => {
                    bytes += data.len() as u64;
                    let expiry = rec.expiry_ms;
                    let props: strata_format::PutProps = rec.props.into();
                    let put_expiry = props.expiry_ms;
                    // The copies name who made the originals.
                    let ttl_actor = ttl_actors.get(&key).cloned();
                    if matches!(replica.state_of(&key), KeyState::Missing) {
                        let op = WriteOp::ReplicaPut { key: key.clone(), props, data: Bytes::clone(&data), created_ms: rec.created_ms };
                        pending.push(replica.submit_as(op, rec.actor.as_deref().map(Arc::from)));
                        if expiry != put_expiry {
                            pending.push(replica.submit_as(WriteOp::TtlUpdate { key, expiry_ms: expiry }, ttl_actor));
                        }
                    } else if let KeyState::Live { expiry_ms, .. } = replica.state_of(&key)
                        && expiry_ms != expiry
                    {
                        pending.push(replica.submit_as(WriteOp::TtlUpdate { key, expiry_ms: expiry }, ttl_actor));
                    }
                }
                Fetched::Deleted => pending.push(replica.submit(WriteOp::ReplicaDelete { key })),
                // The peer's copy is quarantined: another peer, or the
                // scrubber, brings a whole one.
                Fetched::Missing | Fetched::Damaged => {}
            }
        }
        for p in pending {
            match p.await {
                Ok(_) => applied += 1,
                Err(EngineError::AlreadyExists | EngineError::Deleted | EngineError::Expired) => {}
                Err(e) => return Err(format!("applying records from node {peer}: {e}")),
            }
        }
    }
    let mut pending = Vec::new();
    for (key, actor) in deletes {
        pending.push(replica.submit_as(WriteOp::ReplicaDelete { key }, actor));
    }
    for p in pending {
        match p.await {
            Ok(_) => applied += 1,
            Err(EngineError::Deleted) => {}
            Err(e) => return Err(format!("applying deletes from node {peer}: {e}")),
        }
    }
    drop(claims);
    // The token may pass a put another task was fetching only once it is
    // here: if that task failed, this one fetches it next round.
    for key in &theirs {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while rep.in_flight(partition, key) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if matches!(replica.state_of(key), KeyState::Missing) {
            return Err(format!("a put another peer's task was fetching did not arrive ({key:?}); retrying"));
        }
    }
    // Everything is durable here: the token may move (up to the first
    // deferred put).
    let peer_last = chunk.next_lsn.saturating_sub(1);
    let new_lsn = match deferred_from {
        _ if chunk.from_index => peer_last,
        Some(lsn) => lsn - 1,
        None => chunk.entries.last().map_or(token.lsn, |e| e.lsn),
    };
    if !chunk.from_index {
        rep.saw(partition, peer, chunk.incarnation, now_ms, peer_last);
    }
    if deferred_from.is_some() {
        rep.deferred_rounds.fetch_add(1, Ordering::Relaxed);
    }
    let persisted = rep.set_token(replica, peer, Token { incarnation: chunk.incarnation, lsn: new_lsn }).map_err(|e| format!("persisting the token: {e}"))?;
    let counter = if intra { &rep.bytes_intra } else { &rep.bytes_inter };
    counter.fetch_add(bytes, Ordering::Relaxed);
    rep.records.fetch_add(applied, Ordering::Relaxed);
    let local_used = replica.status().used_bytes;
    if let Some(to) = node.filling(partition) {
        node.move_copies.note(partition, to, bytes, chunk.used_bytes, local_used, now_ms, node.clock().now_ms());
    }
    let behind = peer_last.saturating_sub(new_lsn);
    let found = peer_last.saturating_sub(token.lsn);
    let found_bytes = if chunk.from_index { chunk.used_bytes.saturating_sub(local_used) } else { chunk.entries.iter().map(|e| e.record_len as u64).sum() };
    let waited = if found > 0 { node.clock().now_ms().saturating_sub(prev_poll_ms) as f64 / 1000.0 } else { 0.0 };
    rep.record(partition, peer, intra, |l| {
        l.token_lsn = new_lsn;
        l.token_persisted_lsn = persisted;
        l.peer_lsn = peer_last;
        l.lag_records = found;
        l.lag_bytes = found_bytes;
        l.lag_seconds = waited;
        l.error = None;
    });
    // Deferred puts wait for the next round, a period away; anything else
    // left behind is fetched now.
    Ok(behind > 0 && deferred_from.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_types::ManualClock;

    #[test]
    fn puts_are_young_only_past_what_a_sighting_a_grace_ago_saw() {
        let (inc, other) = ([1; 16], [2; 16]);
        let mut s = Sightings::default();
        // No sighting: no age known, nothing is young.
        assert_eq!(s.young_above(inc, 10_000, 1_000), None);
        // One sighting less than the grace ago: what came after it is young.
        s.saw(inc, 10_000, 40, 1_000);
        assert_eq!(s.young_above(inc, 10_500, 1_000), Some(40));
        s.saw(inc, 10_600, 55, 1_000);
        assert_eq!(s.young_above(inc, 10_700, 1_000), Some(40), "the oldest sighting bounds the young");
        // Once a sighting is the grace old, it is the bound.
        s.saw(inc, 11_700, 90, 1_000);
        assert_eq!(s.young_above(inc, 11_700, 1_000), Some(55), "what the peer had at 10.6 s is a second old at 11.7 s");
        assert_eq!(s.young_above(inc, 12_700, 1_000), Some(90));
        // Sightings too old to matter are dropped as new ones come.
        for t in 0..100 {
            s.saw(inc, 12_000 + t * 100, 100 + t, 1_000);
        }
        assert!(s.seen.len() <= 12, "{} sightings kept", s.seen.len());
        assert_eq!(s.young_above(inc, 12_000 + 99 * 100, 1_000), Some(100 + 89));
        // Another incarnation's records have no known age; its first
        // sighting starts the history over.
        assert_eq!(s.young_above(other, 30_000, 1_000), None);
        s.saw(other, 30_000, 3, 1_000);
        assert_eq!(s.young_above(other, 30_100, 1_000), Some(3));
        assert_eq!(s.seen.len(), 1);
    }

    #[test]
    fn tokens_are_written_at_most_once_a_second_and_never_left_behind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let clock = ManualClock::new(10_000);
        let store = strata_engine::Store::open(dir.path(), strata_engine::EngineConfig::default(), Arc::new(clock.clone())).expect("store");
        let replica = store.create_replica(1).expect("replica");
        let rep = Replication::new(Arc::new(clock.clone()));
        let at = |lsn| Token { incarnation: [7; 16], lsn };
        // The first move is written (nothing was, by this process).
        assert_eq!(rep.set_token(&replica, 2, at(1)).expect("set"), 1, "the file's token");
        assert_eq!(load_tokens(&replica).get(&2), Some(&at(1)));
        // Moves within the next second stay in memory.
        for lsn in 2..50 {
            clock.advance(10);
            assert_eq!(rep.set_token(&replica, 2, at(lsn)).expect("set"), 1, "the file's token");
        }
        assert_eq!(rep.token(&replica, 2), at(49));
        assert_eq!(load_tokens(&replica).get(&2), Some(&at(1)));
        assert_eq!(rep.token_writes.load(Ordering::Relaxed), 1);
        // A later call with no change writes what was left behind.
        clock.advance(TOKEN_PERSIST_MS);
        assert_eq!(rep.set_token(&replica, 2, at(49)).expect("set"), 49);
        assert_eq!(load_tokens(&replica).get(&2), Some(&at(49)));
        assert_eq!(rep.token_writes.load(Ordering::Relaxed), 2);
        // Nothing to write: nothing written.
        clock.advance(TOKEN_PERSIST_MS);
        rep.set_token(&replica, 2, at(49)).expect("set");
        assert_eq!(rep.token_writes.load(Ordering::Relaxed), 2);
    }
}

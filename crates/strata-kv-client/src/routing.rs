//! Client-side routing of read-only store gets (Spock §3.1.2, §4.3.2).
//!
//! The router bootstraps the cluster map from any node, hashes a key to
//! its primary ring partition, and asks the partition's nodes, nearest zone
//! first, failing over to the next on an error, until it has the store's
//! required reads. A node that no longer holds the partition answers 421
//! `NotOwned`: the router re-reads the map and tries again.
//!
//! Reads are monotonic: the router remembers the newest version it has
//! seen of each store and sends it as `x-strata-kv-min-version`. During a
//! cluster-wide swap, a node that has not swapped yet answers 503
//! `VersionBehind` and the router asks another replica, or the same ones
//! again a few milliseconds later, so a client never sees version N+1 and
//! then N while a swap is under way. Replicas older than the floor for
//! longer than a swap can take (2 s) mean a rollback: the router follows it.

use base64::Engine;
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use strata_cluster::{ClusterMap, NodeId, decode_map};
use strata_placement::spock::{key_digest, partition_of};

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvValue {
    /// The version that answered.
    pub version: u64,
    /// The value.
    pub value: Bytes,
    /// The node that answered.
    pub node: NodeId,
}

/// Why a routed get failed.
#[derive(Debug, thiserror::Error)]
pub enum KvRouteError {
    /// No node of the seeds or the map gave a map.
    #[error("no cluster map from any node: {0}")]
    NoMap(String),
    /// The map defines no such store.
    #[error("the cluster has no read-only store {0:?}")]
    NoSuchStore(String),
    /// Not enough replicas answered.
    #[error("store {store:?}: {got} of {wanted} required replicas answered: {errors}")]
    Unavailable {
        /// Store.
        store: String,
        /// Replicas that answered.
        got: u32,
        /// Replicas required.
        wanted: u32,
        /// What the others said.
        errors: String,
    },
}

/// How long a get waits for lagging replicas to swap before giving up.
const SWAP_WAIT: Duration = Duration::from_secs(2);

/// Routes gets of read-only stores across a cluster.
pub struct KvRouter {
    seeds: Vec<String>,
    proximity: Vec<String>,
    /// How the router signs (it needs a key with read on the stores) and
    /// whom it trusts.
    opts: strata_client::ClientOptions,
    map: RwLock<Arc<ClusterMap>>,
    floors: Mutex<HashMap<String, u64>>,
    clients: Mutex<HashMap<NodeId, strata_client::Client>>,
}

enum Answer {
    Value(u64, Bytes),
    Missing,
    NotOwned,
    Behind,
    Failed(String),
}

impl KvRouter {
    /// A router that reads the map from the first of `seeds` (node URLs)
    /// that answers, and asks replicas in the order of the zone proximity
    /// list `proximity` (its own zone first), signing and trusting as
    /// `opts` says (nodes are reached with the seeds' scheme).
    pub async fn connect(seeds: Vec<String>, proximity: Vec<String>, opts: strata_client::ClientOptions) -> Result<Self, KvRouteError> {
        let r = Self { seeds, proximity, opts, map: RwLock::new(Arc::new(ClusterMap::default())), floors: Mutex::default(), clients: Mutex::default() };
        r.refresh().await?;
        Ok(r)
    }

    /// The map in use.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Re-reads the map from the seeds or any node of the current map.
    pub async fn refresh(&self) -> Result<(), KvRouteError> {
        let mut urls = self.seeds.clone();
        urls.extend(self.map().nodes.values().map(|n| format!("{}://{}", self.scheme(), n.addr)));
        let mut errors = Vec::new();
        for u in urls {
            let c = strata_client::Client::with_options(&u, &self.opts);
            match fetch_map(&c).await {
                Ok(m) => {
                    keep_newer(&self.map, m);
                    return Ok(());
                }
                Err(e) => errors.push(format!("{u}: {e}")),
            }
        }
        Err(KvRouteError::NoMap(errors.join("; ")))
    }

    /// The seeds' scheme: a cluster whose nodes speak TLS is https everywhere.
    fn scheme(&self) -> &'static str {
        if self.seeds.iter().any(|s| s.starts_with("https://")) { "https" } else { "http" }
    }

    fn client(&self, node: NodeId, addr: &str) -> strata_client::Client {
        let mut g = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        g.entry(node).or_insert_with(|| strata_client::Client::with_options(&format!("{}://{addr}", self.scheme()), &self.opts)).clone()
    }

    async fn ask(&self, node: NodeId, addr: &str, store: &str, key: &[u8], floor: u64) -> Answer {
        let path = format!("/kv/{store}/{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key));
        let headers: Vec<(&str, String)> = if floor > 0 { vec![("x-strata-kv-min-version", floor.to_string())] } else { vec![] };
        match self.client(node, addr).send(http::Method::GET, &path, &headers, strata_client::full(Bytes::new())).await {
            Ok(r) => {
                let version = r.head.headers.get("x-strata-kv-version").and_then(|v| v.to_str().ok()?.parse().ok());
                match (version, r.bytes().await) {
                    (Some(v), Ok(b)) => Answer::Value(v, b),
                    (None, _) => Answer::Failed(format!("node {node}: no version header")),
                    (_, Err(e)) => Answer::Failed(format!("node {node}: {e}")),
                }
            }
            Err(strata_client::ClientError::Api { status: 404, code, .. }) if code == "NoSuchKey" => Answer::Missing,
            Err(strata_client::ClientError::Api { status: 421, .. }) => Answer::NotOwned,
            Err(strata_client::ClientError::Api { status: 503, code, .. }) if code == "VersionBehind" => Answer::Behind,
            Err(e) => Answer::Failed(format!("node {node}: {e}")),
        }
    }

    /// The value of `key` in `store` (`None`: not in the live version).
    pub async fn get(&self, store: &str, key: &[u8]) -> Result<Option<KvValue>, KvRouteError> {
        let start = Instant::now();
        let mut refreshed = false;
        loop {
            let map = self.map();
            let Some(spec) = map.kv.stores.get(store) else {
                if refreshed {
                    return Err(KvRouteError::NoSuchStore(store.to_string()));
                }
                refreshed = true;
                self.refresh().await?;
                continue;
            };
            let wanted = spec.required_reads.max(1);
            let partitions = map.kv.ring.len() as u32;
            let p = partition_of(&key_digest(key), partitions);
            let nodes = map.kv_preference(store, p, &self.proximity).map_err(|_| KvRouteError::NoSuchStore(store.to_string()))?;
            let floor = self.floors.lock().unwrap_or_else(|e| e.into_inner()).get(store).copied().unwrap_or(0);
            let (mut got, mut best, mut missing, mut behind, mut stale) = (0u32, None::<KvValue>, false, false, false);
            let mut errors = Vec::new();
            for node in nodes {
                if got >= wanted {
                    break;
                }
                let Some(n) = map.nodes.get(&node) else { continue };
                match self.ask(node, &n.addr, store, key, floor).await {
                    Answer::Value(version, value) => {
                        got += 1;
                        if best.as_ref().is_none_or(|b| version > b.version) {
                            best = Some(KvValue { version, value, node });
                        }
                    }
                    Answer::Missing => {
                        got += 1;
                        missing = true;
                    }
                    Answer::NotOwned => stale = true,
                    Answer::Behind => behind = true,
                    Answer::Failed(e) => errors.push(e),
                }
            }
            if got >= wanted {
                if let Some(b) = &best {
                    let mut f = self.floors.lock().unwrap_or_else(|e| e.into_inner());
                    let e = f.entry(store.to_string()).or_insert(0);
                    *e = (*e).max(b.version);
                }
                return Ok(if best.is_none() && missing { None } else { best });
            }
            if stale && !refreshed {
                // The ring moved (Spock §4.3.2): re-read the map and retry.
                refreshed = true;
                self.refresh().await?;
                continue;
            }
            if behind && start.elapsed() < SWAP_WAIT {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            if behind && floor > 0 {
                // Older for longer than any swap takes: a rollback, which
                // clients follow. Forget the floor and read again.
                self.floors.lock().unwrap_or_else(|e| e.into_inner()).remove(store);
                continue;
            }
            return Err(KvRouteError::Unavailable { store: store.to_string(), got, wanted, errors: errors.join("; ") });
        }
    }
}

/// The cluster map a node serves.
pub(crate) async fn fetch_map(c: &strata_client::Client) -> Result<ClusterMap, String> {
    let r = c.send(http::Method::GET, "/meta/v1/map", &[], strata_client::full(Bytes::new())).await.map_err(|e| e.to_string())?;
    decode_map(&r.bytes().await.map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

/// Takes `m` unless the map held is newer.
pub(crate) fn keep_newer(held: &RwLock<Arc<ClusterMap>>, m: ClusterMap) {
    let mut cur = held.write().unwrap_or_else(|p| p.into_inner());
    if m.epoch >= cur.epoch {
        *cur = Arc::new(m);
    }
}

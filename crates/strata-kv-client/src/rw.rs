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
    nodes: Vec<strata_client::Client>,
    next: AtomicUsize,
    /// Client-side routing: the map, the zone proximity list, clients by node.
    routing: Option<Routing>,
}

struct Routing {
    map: std::sync::RwLock<std::sync::Arc<strata_cluster::ClusterMap>>,
    proximity: Vec<String>,
    opts: strata_client::ClientOptions,
    scheme: &'static str,
    clients: std::sync::Mutex<std::collections::HashMap<strata_cluster::NodeId, strata_client::Client>>,
}

impl Routing {
    fn map(&self) -> std::sync::Arc<strata_cluster::ClusterMap> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The nodes to try for `key`: a put's pseudo-master first, a get's
    /// nearest replica first; then the rest of the preference list.
    fn order(&self, store: &str, key: &[u8], put: bool) -> Option<Vec<strata_client::Client>> {
        let map = self.map();
        let mut pref = map.rw_route(store, key).ok()?;
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
                    Some(clients.entry(*n).or_insert_with(|| strata_client::Client::with_options(&format!("{}://{addr}", self.scheme), &self.opts)).clone())
                })
                .collect(),
        )
    }
}

fn b64url(k: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(k)
}

impl RwClient {
    /// A client of the nodes at `urls`, signing and trusting as `opts` says.
    pub fn new(urls: &[String], opts: &strata_client::ClientOptions) -> Self {
        Self { nodes: urls.iter().map(|u| strata_client::Client::with_options(u, opts)).collect(), next: AtomicUsize::new(0), routing: None }
    }

    /// A client that routes itself (client-side routing): it reads the
    /// cluster map from the first of `seeds` that answers, and orders each
    /// key's preference list by the zone proximity list `proximity` (its
    /// own zone first) for gets and by the pseudo-master for puts.
    pub async fn connect(seeds: &[String], proximity: Vec<String>, opts: &strata_client::ClientOptions) -> Result<Self, RwClientError> {
        let mut c = Self::new(seeds, opts);
        let scheme = if seeds.first().is_some_and(|s| s.starts_with("https")) { "https" } else { "http" };
        c.routing = Some(Routing {
            map: std::sync::RwLock::new(std::sync::Arc::new(strata_cluster::ClusterMap::default())),
            proximity,
            opts: opts.clone(),
            scheme,
            clients: Default::default(),
        });
        c.refresh().await?;
        Ok(c)
    }

    /// Reads the cluster map again (client-side routing).
    pub async fn refresh(&self) -> Result<(), RwClientError> {
        let Some(r) = &self.routing else { return Ok(()) };
        let mut errors = Vec::new();
        for c in &self.nodes {
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
    async fn targets(&self, store: &str, key: &[u8], put: bool) -> Vec<strata_client::Client> {
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
    async fn call(
        &self,
        store: &str,
        key: &[u8],
        method: http::Method,
        path: &str,
        headers: &[(&str, String)],
        body: Bytes,
    ) -> Result<serde_json::Value, RwClientError> {
        let put = method != http::Method::GET;
        let mut errors = Vec::new();
        for c in &self.targets(store, key, put).await {
            match c.send(method.clone(), path, headers, strata_client::full(body.clone())).await {
                Ok(r) => {
                    let b = r.bytes().await.map_err(RwClientError::Api)?;
                    return serde_json::from_slice(&b).map_err(|e| RwClientError::Protocol(e.to_string()));
                }
                Err(strata_client::ClientError::Api { status: 409, message, .. }) => return Err(RwClientError::Obsolete(message)),
                Err(e @ strata_client::ClientError::Transport(_)) => errors.push(format!("{}: {e}", c.base())),
                Err(e) => return Err(RwClientError::Api(e)),
            }
        }
        Err(RwClientError::Unreachable(errors.join("; ")))
    }

    /// Every concurrent version of `key`.
    pub async fn get(&self, store: &str, key: &[u8]) -> Result<RwVersions, RwClientError> {
        let v = self.call(store, key, http::Method::GET, &format!("/rw/{store}/{}", b64url(key)), &[], Bytes::new()).await?;
        let bad = |what: &str| RwClientError::Protocol(format!("get answer without {what}"));
        let mut out = RwVersions { clock: v["clock"].as_str().ok_or_else(|| bad("clock"))?.to_string(), versions: Vec::new() };
        for e in v["versions"].as_array().ok_or_else(|| bad("versions"))? {
            let clock = e["clock"].as_str().ok_or_else(|| bad("a version's clock"))?.to_string();
            let value = base64::engine::general_purpose::STANDARD
                .decode(e["value"].as_str().ok_or_else(|| bad("a version's value"))?)
                .map_err(|e| RwClientError::Protocol(e.to_string()))?;
            out.versions.push((clock, Bytes::from(value)));
        }
        Ok(out)
    }

    /// Puts `value` over what was read with `clock`; the clock written.
    pub async fn put(&self, store: &str, key: &[u8], value: Bytes, clock: &str) -> Result<String, RwClientError> {
        let v = self.call(store, key, http::Method::PUT, &format!("/rw/{store}/{}", b64url(key)), &[("x-strata-clock", clock.to_string())], value).await?;
        v["clock"].as_str().map(String::from).ok_or_else(|| RwClientError::Protocol("put answer without clock".into()))
    }

    /// Deletes what was read with `clock`.
    pub async fn delete(&self, store: &str, key: &[u8], clock: &str) -> Result<String, RwClientError> {
        let v = self
            .call(store, key, http::Method::DELETE, &format!("/rw/{store}/{}", b64url(key)), &[("x-strata-clock", clock.to_string())], Bytes::new())
            .await?;
        v["clock"].as_str().map(String::from).ok_or_else(|| RwClientError::Protocol("delete answer without clock".into()))
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
